"""The one place the steps bind to the other parts of kfchaos: fault backend, replay engine, report.

Each function is the narrowest interface a step needs. Where a part has not landed yet the function raises
`PartMissing`, naming the module, so a run fails loudly (and the exit handler still cleans up) instead of
passing on missing data.
"""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from kfchaos.errors import KfchaosError
from kfchaos.faults.backend import TargetSweep
from kfchaos.spec import Experiment, FaultBase
from kfchaos.steps.stopping import replay_stopping


class PartMissing(KfchaosError):
    """A part of kfchaos this step needs is not installed in this build."""


def _module(name: str, why: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PartMissing(f"{why} needs {name}, which this build does not have ({exc})") from None


class FaultBackend(Protocol):
    """The fault backend over experiment faults (kfchaos.faults.backend.FaultBackend for Chaos Mesh, the demo's local
    one): what preflight, inject, remove and cleanup use."""

    def preflight(self, faults: list[FaultBase]) -> Any: ...
    def apply(self, fault: FaultBase) -> Any: ...
    def wait_injected(self, handle: Any) -> Any: ...
    def remove(self, handle: Any) -> Any: ...
    def wait_recovered(self, handle: Any) -> Any: ...
    def sweep(self, run_id: str) -> Any: ...
    def sweep_at_target(self, run_id: str) -> TargetSweep: ...


BACKEND_ENV = "KFCHAOS_FAULT_BACKEND"  # chaosmesh (default) or local (the embedded demo)
PROXY_ENV = "KFCHAOS_FAULT_PROXY"  # local backend: the fault proxy's control URL
DEMO_STATE_ENV = "KFCHAOS_DEMO_STATE"  # local backend: the demo supervisor's state file
# Local backend: the process whose death ends the run's faults (the fault proxy drops a fault whose owner is gone).
# Under kfp.local each task is its own short process and a fault outlives the task that created it (the first
# stage's start task creates it, the last stage's task removes it), so the owner is the process running the whole
# pipeline (kfchaos.kfp.runs.run_local), which the tasks inherit this variable from.
FAULT_OWNER_ENV = "KFCHAOS_FAULT_OWNER_PID"


# Local runs: the URL the tasks replay to (`kfchaos run --local --target`), set by kfchaos.kfp.runs.run_local for the
# tasks it starts, which inherit it as they inherit FAULT_OWNER_ENV; a task without a `target` parameter (preflight,
# the exit handler, a sharded stage's start) keys the local lock by it. And where the run can be looked at, for
# the lease's holder details (`kfchaos status`).
TARGET_URL_ENV = "KFCHAOS_TARGET_URL"
RUN_WHERE_ENV = "KFCHAOS_RUN_WHERE"


def fault_owner_pid() -> int:
    """The run's owner process (FAULT_OWNER_ENV when it names a process id), else this process."""
    named = os.environ.get(FAULT_OWNER_ENV, "")
    return int(named) if named.isdigit() and int(named) > 1 else os.getpid()


# What a step makes once from its experiment: its fault backend (one API client) and its faults' manifests. A step
# parses its experiment once (kfchaos.steps.context), so that object stands for the step: a value is kept for the
# last experiment object, run id and environment seen, and made anew for any other.
_PER_STEP: dict[str, tuple[Experiment, tuple[str, ...], Any]] = {}


def _once_per_step(what: str, experiment: Experiment, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
    held = _PER_STEP.get(what)
    if held is not None and held[0] is experiment and held[1] == key:
        return held[2]
    value = make()
    _PER_STEP[what] = (experiment, key, value)
    return value


def cluster_faults(experiment: Experiment) -> list[FaultBase]:
    """The faults a backend injects; traffic-side ones (long-context bursts) are done by the replay."""
    return [f for f in experiment.spec.faults if f.cluster_side]


def render_faults(experiment: Experiment, run_id: str) -> dict[str, dict[str, Any]]:
    """The Chaos Mesh manifest of each cluster-side fault by fault name (what the audit record keeps)."""
    render = _module("kfchaos.faults.render", "rendering faults")

    def make() -> dict[str, dict[str, Any]]:
        return {f.name: render.render_fault(experiment, f, run_id) for f in cluster_faults(experiment)}

    manifests: dict[str, dict[str, Any]] = _once_per_step("manifests", experiment, (run_id,), make)
    return {name: copy.deepcopy(manifest) for name, manifest in manifests.items()}  # a caller may change its copy


def fault_backend(experiment: Experiment, run_id: str) -> FaultBackend:
    """Chosen by env KFCHAOS_FAULT_BACKEND, because the same pipeline runs on a cluster and under kfp.local. One per
    step: the stage's faults, their poller and the foreign-interference watch share it (and its API client)."""
    environment = tuple(os.environ.get(name, "") for name in (BACKEND_ENV, PROXY_ENV, DEMO_STATE_ENV, "KUBECONFIG"))
    backend: FaultBackend = _once_per_step(
        "backend", experiment, (run_id, *environment), lambda: _new_fault_backend(experiment, run_id)
    )
    return backend


def _new_fault_backend(experiment: Experiment, run_id: str) -> FaultBackend:
    kind = os.environ.get(BACKEND_ENV, "chaosmesh")
    if kind == "local":
        local = _module("kfchaos.demo.faults.local_backend", "the local fault backend")
        control, state = os.environ.get(PROXY_ENV), os.environ.get(DEMO_STATE_ENV)
        if not control or not state:
            raise KfchaosError(f"{BACKEND_ENV}=local needs {PROXY_ENV} and {DEMO_STATE_ENV}")
        backend: FaultBackend = local.LocalFaultBackend(experiment, run_id, control, Path(state))
        return backend
    if kind != "chaosmesh":
        raise KfchaosError(f"{BACKEND_ENV}={kind!r}: expected chaosmesh or local")
    chaosmesh = _module("kfchaos.faults.chaosmesh", "injecting faults on a cluster")
    backend = chaosmesh.ChaosMeshBackend.from_environment(experiment, run_id)
    return backend


def uses_cluster(experiment: Experiment) -> bool:
    """Whether the run's lease and its interference watch live on a cluster: a KFP task pod (KFP_POD_NAME) always,
    elsewhere a run whose fault backend is Chaos Mesh and that has cluster-side faults (it needs the cluster
    anyway). Otherwise (the demo's local backend, a local run with no cluster faults) a local run without one."""
    if os.environ.get(BACKEND_ENV) == "local":
        return False
    return bool(os.environ.get("KFP_POD_NAME")) or bool(cluster_faults(experiment))


def _run_info(experiment: Experiment, run_id: str, local: bool) -> Any:
    lease = _module("kfchaos.lease.record", "the target's lease")
    target = experiment.spec.target
    namespaces = sorted({target.namespace, *(experiment.fault_namespace(f) for f in cluster_faults(experiment))})
    if local:
        owner = fault_owner_pid()
        where = os.environ.get(RUN_WHERE_ENV) or f"kfchaos on {lease.this_host()}, process {owner}"
        return lease.RunInfo(run_id, experiment.metadata.name, where, namespaces=namespaces,
                             host=lease.this_host(), pid=owner)  # fmt: skip
    where = os.environ.get(RUN_WHERE_ENV) or f"KFP run {run_id}"
    return lease.RunInfo(run_id, experiment.metadata.name, where, namespaces=namespaces)


def target_lease(experiment: Experiment, run_id: str, target: str = "") -> Any:
    """The run's view of its target's lease (a kfchaos.lease.TargetLease): the Lease named from the target's
    namespace and selector in that namespace (uses_cluster), else the local lock of the target URL (`target`, else
    TARGET_URL_ENV, else spec.target.endpoint)."""
    lease = _module("kfchaos.lease", "the target's lease")
    spec_target = experiment.spec.target
    if uses_cluster(experiment):
        kube = _module("kfchaos.lease.kube", "the target's lease on a cluster")
        selector = spec_target.selector
        expressions = [e.model_dump() for e in selector.expressions]
        name = lease.lease_name(spec_target.namespace, selector.labels, expressions)
        backend: Any = fault_backend(experiment, run_id)  # the Chaos Mesh backend: its API client and settings
        api = backend.api_client
        store = kube.KubeLeaseStore(api, spec_target.namespace, name)
        text = ",".join(f"{k}={v}" for k, v in sorted(selector.labels.items()))
        described = f"pods {text or 'matching'} in namespace {spec_target.namespace}"
        return lease.TargetLease(store, _run_info(experiment, run_id, local=False), name=name,
                                 namespace=spec_target.namespace, target=described)  # fmt: skip
    local = _module("kfchaos.lease.local", "the target's local lock")
    url = target or os.environ.get(TARGET_URL_ENV) or spec_target.endpoint
    store = local.FileLeaseStore.for_url(url)
    return lease.TargetLease(store, _run_info(experiment, run_id, local=True), name=store.folder.name,
                             namespace="", target=lease.url_key(url))  # fmt: skip


def foreign_watch(experiment: Experiment, run_id: str, stage: int, own: list[dict[str, Any]]) -> Any | None:
    """The stage's watch for foreign interference (kfchaos.faults.foreign); None where the run has no cluster (the
    demo's local backend has no objects another tool could make: its lock keeps other kfchaos runs out). `own`:
    this run's manifests alive in the stage."""
    interval = min(10.0, max(1.0, experiment.spec.traffic.stage_duration / 10))
    if not uses_cluster(experiment):
        return None
    foreign = _module("kfchaos.faults.foreign", "watching for foreign interference")
    selectors = _module("kfchaos.faults.selectors", "the target's label selector")
    target = experiment.spec.target
    selector = selectors.label_selector(
        {"labelSelectors": target.selector.labels,
         "expressionSelectors": [e.model_dump() for e in target.selector.expressions]}
    )  # fmt: skip
    backend = fault_backend(experiment, run_id)
    return foreign.ForeignWatch(backend, run_id, target.namespace, selector, own, interval)


def replay_stage(
    experiment: Experiment,
    stage: int,
    base_dir: str,
    target: str,
    records_path: str,
    duration: float | None,
    fault_active: bool,
) -> dict[str, Any]:
    """Replay one stage (or a probe of `duration` seconds at that stage's rate) and write Parquet records.

    Returns the replay summary (kfchaos.traffic StageSummary as a dict) with `valid` as the verdict reads it:
    True, or the reason the replay itself is not trustworthy.
    """
    api = _module("kfchaos.traffic.api", "replaying traffic")
    overrides: dict[str, Any] = {}
    if duration is not None:
        # A probe (steady state before injection, recovery after removal) measures the system without faults,
        # so the traffic-side ones (long-context bursts) are left out of its plan too.
        overrides = {"duration": duration, "traffic_faults": ()}
    plan = api.plan_stage(experiment, stage, base_dir=base_dir, **overrides)
    endpoint = target or experiment.spec.target.endpoint
    # Under a step's guard, SIGTERM ends the stage with its records kept and marked, then stops the step.
    result = replay_stopping(
        lambda signals: api.run_stage(plan, endpoint, out=records_path, fault_active=fault_active, signals=signals)
    )
    summary: dict[str, Any] = result.summary.to_dict()
    summary["valid"] = True if summary.get("valid", True) else (summary.get("invalid_reason") or "replay invalid")
    return summary


def render_report(verdict: dict[str, Any], context: dict[str, Any]) -> tuple[str, str] | None:
    """(Markdown, HTML) from kfchaos.report, or None where it has not landed (the step then writes its own)."""
    try:
        summary = importlib.import_module("kfchaos.report.markdown")
        page = importlib.import_module("kfchaos.report.page")
    except ImportError:
        return None
    rendered: tuple[str, str] = (summary.markdown(verdict, context), page.html(verdict, context))
    return rendered


def metrics_snapshot(experiment: Experiment, window: tuple[float, float]) -> Any | None:
    """Prometheus series for the stage window (a kfchaos.metrics.snapshot.MetricsSnapshot), or None where the
    metrics client has not landed; the verdict then reports the metric-based checks INCONCLUSIVE, never PASS."""
    try:
        collect = importlib.import_module("kfchaos.metrics.collect")
    except ImportError:
        return None
    return collect.snapshot_for_experiment(experiment, window)


def kube_reader() -> tuple[Any, str] | None:
    """The evidence bundle's KubeReader under the local fault backend (the demo supervisor's state file stands
    in for the pod API), else None: kfchaos.evidence.runbundle then reads the cluster. Chosen here, with the fault
    backend, so kfchaos.evidence never imports the demo."""
    state = os.environ.get(DEMO_STATE_ENV)
    if os.environ.get(BACKEND_ENV) != "local" or not state:
        return None
    kubeview = _module("kfchaos.demo.faults.kubeview", "the demo's pod view")
    return kubeview.DemoKube(Path(state)), ""


def evidence_bundle(
    experiment: Experiment, status: str, metrics: Any, window: tuple[float, float], failing: list[str]
) -> dict[str, Any] | None:
    """The OOM evidence bundle's JSON (kfchaos.evidence) when the outcome calls for one, else None. Evidence is
    for people and the knowledge base: it never changes the verdict, and a failure to collect never fails the run."""
    try:
        runbundle = importlib.import_module("kfchaos.evidence.runbundle")
        bundle: dict[str, Any] | None = runbundle.for_run(
            experiment, status, metrics, window, failing, kube=kube_reader()
        )
    except Exception as exc:  # never let evidence gathering turn a verdict into a crash
        failed = f"evidence collection failed: {type(exc).__name__}: {str(exc)[:300]}"
        return {"kind": "kfchaos.EvidenceBundle", "version": 1, "trigger": [f"{status} run"],
                "window": list(window), "items": [], "notes": [failed]}  # fmt: skip
    return bundle
