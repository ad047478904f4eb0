"""The Chaos Mesh backend: the lifecycle of a run's fault objects on a cluster.

Rendered manifests become chaos-mesh.org objects (or the GPU allocator Pod) through the Kubernetes API: preflight
(Chaos Mesh installed, targets running, placement, a dry run), apply, wait until injected, watch, remove, wait until
recovered, and sweep. Every call goes through `KubeClient` (kfchaos.faults.kubeclient: retried, bounded, recorded in
`self.events` for the audit record); what differs between a chaos object and the allocator pod is asked of the
object's kind (kfchaos.faults.objectkinds). Objects are found again by their deterministic names (apply is idempotent)
and by the run label (sweep), so a step that crashed, was killed or retried leaves nothing behind that the exit
handler cannot find.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException

from kfchaos import kubeconnect, netsafe
from kfchaos.faults import clustercheck
from kfchaos.faults.backend import (
    STUCK_REMEDY,
    ApiEvent,
    BackendError,
    ChaosMeshNotInstalled,
    FaultHandle,
    InjectionFailed,
    InjectionReport,
    InjectionTimeout,
    LeftNeverInjected,
    Manifest,
    PreflightReport,
    RecoveryTimeout,
    StuckTerminating,
    TargetsGone,
    TargetSweep,
)
from kfchaos.faults.catalog import GROUP, PLURALS
from kfchaos.faults.chaosrecords import (
    never_injected,
    parse_records,
    raw_records,
    selects_containers,
    stale_reason,
    wrong_container,
)
from kfchaos.faults.foreign import described_pod, object_reaches
from kfchaos.faults.gpu import EXEC_KIND
from kfchaos.faults.kubeclient import KubeClient
from kfchaos.faults.naming import LABEL_MANAGED_BY, LABEL_RUN_ID, MANAGED_BY, run_selector
from kfchaos.faults.objectkinds import SWEPT_PLURALS, conditions, fault_handle, injection_time, kind_of, kind_of_plural
from kfchaos.faults.render import pod_selector, render_fault
from kfchaos.faults.retry import RetryPolicy
from kfchaos.faults.safety import check_pod_share
from kfchaos.faults.selectors import label_selector
from kfchaos.faultspec.kinds import TRAFFIC_SIDE_TYPES
from kfchaos.spec import Experiment, FaultBase
from kfchaos.units import parse_duration

HOST_ENV = "KFCHAOS_KUBE_HOST"  # an explicit API URL for pipeline steps; else in-cluster config
CONTEXT_ENV = "KFCHAOS_KUBE_CONTEXT"
INJECT_TIMEOUT_ENV = "KFCHAOS_INJECT_TIMEOUT"  # e.g. 2m: how long a step waits for Selected + AllInjected
RECOVER_TIMEOUT_ENV = "KFCHAOS_RECOVER_TIMEOUT"
DEFAULT_INJECT_TIMEOUT = 120.0
DEFAULT_RECOVER_TIMEOUT = 300.0
# Failed Apply attempts in a row on one record before wait_injected calls the fault failed. Chaos Mesh retries a
# failed Apply at once and without end (controllers/common/records/controller.go: `needRetry`, Requeue with the
# controller's rate limiter, "TODO: add backoff and retry mechanism"), so three in a row take well under a second
# and a single transient error (a conflict) does not end the wait.
DEFAULT_APPLY_FAILURE_LIMIT = 3


class ChaosMeshBackend:
    """`FaultBackend` on the Kubernetes API: chaos objects and the GPU allocator pod, through one `KubeClient`."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        retry: RetryPolicy | None = None,
        poll_interval: float = 1.0,
        request_timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        experiment: Experiment | None = None,
        run_id: str | None = None,
        pipeline_version: str | None = None,
        inject_timeout: float = DEFAULT_INJECT_TIMEOUT,
        recover_timeout: float = DEFAULT_RECOVER_TIMEOUT,
        placement_checks: bool = True,
        apply_failure_limit: int = DEFAULT_APPLY_FAILURE_LIMIT,
    ) -> None:
        self.api_client = api_client
        self.kube = KubeClient(api_client, retry, request_timeout, sleep)
        self.poll_interval = poll_interval
        self._sleep = sleep
        # Bound to an experiment run, the backend also takes faults (rendered here) instead of manifests,
        # and sweeps the namespaces that experiment touches.
        self.experiment = experiment
        self.run_id = run_id
        self.pipeline_version = pipeline_version
        self.inject_timeout = inject_timeout
        self.recover_timeout = recover_timeout
        self.apply_failure_limit = max(1, apply_failure_limit)
        self.events: list[ApiEvent] = self.kube.events  # the client's record of every call, for the audit
        # Preflight's reads outside the target namespace (chaos-daemon pods, nodes, the controller's
        # Deployment, namespaces; kfchaos.faults.clustercheck): best effort, noted as unchecked when the
        # identity may not read them (manifests/ does not grant them; `kfchaos doctor` runs them in full).
        self.placement_checks = placement_checks

    @classmethod
    def from_config(
        cls, host: str | None = None, kubeconfig: str | None = None, context: str | None = None, **options: Any
    ) -> ChaosMeshBackend:
        """An explicit host (no credentials; for a proxy such as `kubectl proxy`), a kubeconfig (file and/or
        context), or else in-cluster config (a pipeline step's service account), falling back to ~/.kube/config."""
        if host is not None or kubeconfig is not None or context is not None:
            return cls(kubeconnect.api_client(kubeconfig, context, host), **options)
        try:
            return cls(kubeconnect.api_client(), **options)
        except (kubernetes.config.ConfigException, OSError) as exc:
            raise BackendError(
                f"no cluster access: not in a pod and no usable kubeconfig ({exc}); give --host or --kubeconfig"
            ) from None

    @classmethod
    def from_environment(cls, experiment: Experiment, run_id: str, **options: Any) -> ChaosMeshBackend:
        """For pipeline steps: $KFCHAOS_KUBE_HOST, else $KUBECONFIG (+ $KFCHAOS_KUBE_CONTEXT), else in-cluster;
        wait timeouts from $KFCHAOS_INJECT_TIMEOUT and $KFCHAOS_RECOVER_TIMEOUT (durations such as 2m)."""
        for env, key in ((INJECT_TIMEOUT_ENV, "inject_timeout"), (RECOVER_TIMEOUT_ENV, "recover_timeout")):
            if os.environ.get(env):
                try:
                    options.setdefault(key, parse_duration(os.environ[env]))
                except ValueError as exc:
                    raise BackendError(f"${env}: {exc}") from None
        return cls.from_config(
            host=os.environ.get(HOST_ENV) or None,
            kubeconfig=os.environ.get("KUBECONFIG") or None,
            context=os.environ.get(CONTEXT_ENV) or None,
            experiment=experiment,
            run_id=run_id,
            **options,
        )

    def manifest_of(self, item: Manifest | FaultBase) -> Manifest:
        """A manifest as given, or the rendering of an experiment fault for the bound run."""
        if isinstance(item, dict):
            return item
        if self.experiment is None or self.run_id is None:
            raise BackendError("this backend has no experiment run bound; pass rendered manifests")
        return render_fault(self.experiment, item, self.run_id, self.pipeline_version)

    def experiment_namespaces(self) -> list[str] | None:
        """Every namespace the bound experiment's faults create objects in; None when no experiment is bound."""
        if self.experiment is None:
            return None
        spaces = {self.experiment.spec.target.namespace}
        spaces.update(
            self.experiment.fault_namespace(f) for f in self.experiment.spec.faults if f.type not in TRAFFIC_SIDE_TYPES
        )
        return sorted(spaces)

    def list_objects(self, plural: str, namespace: str, selector: str = "") -> list[dict[str, Any]] | None:
        """Objects of a chaos kind or pods in one namespace (paged and bounded: KubeClient.list_objects); None if not
        served."""
        return self.kube.list_objects(plural, namespace, selector)

    def _create(self, manifest: Manifest, dry_run: bool = False) -> dict[str, Any] | ApiException:
        plural, group = kind_of(manifest).plural_group(manifest)
        return self.kube.create(plural, group, manifest, dry_run)

    # ------------------------------------------------------------ FaultBackend

    def preflight(self, items: Sequence[Manifest | FaultBase]) -> PreflightReport:
        """Chaos Mesh installed, every target selector matches a running pod, every object passes a dry run."""
        manifests = [self.manifest_of(item) for item in items]
        report = PreflightReport()
        for plural in sorted({PLURALS[m["kind"]] for m in manifests if m["kind"] in PLURALS}):  # the chaos kinds
            crd = f"{plural}.{GROUP}"
            if not self.kube.has_crd(crd):
                raise ChaosMeshNotInstalled(
                    f"Chaos Mesh is not installed in this cluster: CustomResourceDefinition {crd} not found. "
                    "Install Chaos Mesh (helm chart chaos-mesh/chaos-mesh) before running this experiment"
                )
            report.crds.append(crd)
        for item, manifest in zip(items, manifests, strict=True):
            name = manifest["metadata"]["name"]
            pods = self._running_targets(manifest)
            if not pods:
                namespace, selector = kind_of(manifest).target_of(manifest)
                raise BackendError(
                    f"{manifest['kind']} {name}: the target selector {selector!r} matches no running pod in "
                    f"namespace {namespace!r}; nothing would be injected"
                )
            report.matching_pods[name] = len(pods)
            sidecar_first = _first_container_problem(manifest, pods)
            if sidecar_first:
                raise BackendError(sidecar_first)
            if self.experiment is not None and not isinstance(item, dict):
                check_pod_share(self.experiment, item, len(pods))
            other_side = self._other_side(manifest)
            if manifest["kind"] == EXEC_KIND:
                continue  # not an API object; exec is checked when it runs
            # `from`/`both` inject on the target pods too (through their nodes' chaos-daemon); `to` only on ours.
            both_ends = (manifest.get("spec") or {}).get("direction") in ("from", "both")
            self._check_placement(manifest, pods + (other_side if both_ends else []), report)
            created = self._create(kind_of(manifest).placed(manifest, pods), dry_run=True)
            # 409: the object exists already (a retried step) - the server accepted it once.
            report.dry_run.append(name)
            del created
        return report

    def _other_side(self, manifest: Manifest) -> list[dict[str, Any]]:
        """Running pods of a network fault's `spec.target`: Chaos Mesh selects them too (pkg/selector,
        api/v1alpha1/networkchaos_types.go Target *PodSelector) and fails when none match."""
        target = (manifest.get("spec") or {}).get("target")
        if manifest["kind"] != "NetworkChaos" or not isinstance(target, dict):
            return []
        selector = target.get("selector") or {}
        namespace = (selector.get("namespaces") or [manifest["metadata"]["namespace"]])[0]
        listed = self.kube.list_objects("pods", namespace, label_selector(selector)) or []
        running = [p for p in listed if (p.get("status") or {}).get("phase") == "Running"]
        if not running:
            raise BackendError(
                f"NetworkChaos {manifest['metadata']['name']}: its target (the other side) "
                f"{label_selector(selector)!r} matches no running pod in namespace {namespace!r}; "
                "Chaos Mesh would fail to select it"
            )
        return running

    def _check_placement(self, manifest: Manifest, pods: list[dict[str, Any]], report: PreflightReport) -> None:
        """chaos-daemon on the pods' nodes and the namespace filter (kfchaos.faults.clustercheck), before
        anything is injected. What the identity may not read is noted as unchecked, not failed."""
        name = manifest["metadata"]["name"]
        if not self.placement_checks:
            return
        try:
            problems = clustercheck.namespace_filter_gaps(self.api_client, clustercheck.selected_namespaces([manifest]))
            if clustercheck.needs_daemon(manifest):
                problems += clustercheck.daemon_gaps(
                    self.api_client, [(p.get("spec") or {}).get("nodeName") for p in pods]
                )
        except ApiException as exc:
            report.unchecked.append(f"{name}: placement ({exc.status} {exc.reason})")
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            report.unchecked.append(f"{name}: placement ({type(exc).__name__})")
            return
        if problems:
            raise BackendError(f"{manifest['kind']} {name} cannot be injected: " + "; ".join(problems))

    def _running_targets(self, manifest: Manifest) -> list[dict[str, Any]]:
        namespace, selector = kind_of(manifest).target_of(manifest)
        pods = self.kube.list_objects("pods", namespace, selector) or []
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return sorted(running, key=lambda p: p["metadata"]["name"])

    def apply(self, item: Manifest | FaultBase) -> FaultHandle:
        """Create the object; if it exists (a retried step, or a reply that was lost), take the existing one."""
        manifest = self.manifest_of(item)
        if manifest["kind"] == EXEC_KIND:
            raise BackendError(
                "gpu-memory-pressure with method exec is rendered but not applied by this backend yet; use method pod"
            )
        kind = kind_of(manifest)
        meta = manifest["metadata"]
        if kind.runs_on_a_target_node:
            manifest = kind.placed(manifest, self._running_targets(manifest))
        result = self._create(manifest)
        if isinstance(result, ApiException):  # 409 AlreadyExists
            probe = fault_handle(manifest, "")
            existing = self.kube.get(probe)
            if existing is None:
                raise BackendError(f"{manifest['kind']} {meta['name']} exists and vanished at once; retry the step")
            run = (existing["metadata"].get("labels") or {}).get(LABEL_RUN_ID)
            if run != meta["labels"].get(LABEL_RUN_ID):
                raise BackendError(
                    f"{manifest['kind']} {meta['namespace']}/{meta['name']} exists but belongs to run {run!r}, "
                    f"not {meta['labels'].get(LABEL_RUN_ID)!r}; refusing to adopt it"
                )
            result = existing
        return fault_handle(manifest, str(result["metadata"].get("uid", "")))

    def wait_injected(self, handle: FaultHandle, timeout: float | None = None) -> InjectionReport:
        """Poll until Selected and AllInjected are True (a Pod: Running and ready, i.e. memory held).
        `timeout` defaults to the backend's inject_timeout. Ends early with InjectionFailed once a record shows
        `apply_failure_limit` failed Apply attempts in a row (kfchaos.faults.chaosrecords.apply_failures), or
        once the object can never be injected (an allocator pod that ended)."""
        timeout = self.inject_timeout if timeout is None else timeout
        kind = kind_of_plural(handle.plural)
        started = time.monotonic()
        last: dict[str, Any] | None = None
        while True:
            last = self.kube.get(handle)
            if last is None:
                raise BackendError(f"{handle.kind} {handle.namespace}/{handle.name} disappeared while being injected")
            ended = kind.ended_early(handle, last)
            if ended is not None:
                raise InjectionTimeout(ended)
            targets = kind.injected_targets(last)
            if targets is not None:
                problems = self.target_problems(last, one_shot=handle.one_shot)
                if problems:
                    raise InjectionTimeout(
                        f"{handle.kind} {handle.namespace}/{handle.name} reports AllInjected but does not hit its "
                        f"intended targets: {'; '.join(problems)}"
                    )
                return InjectionReport(handle, targets, time.monotonic() - started, injection_time(handle, last))
            failed = self._apply_failed(handle, last)
            if failed is not None:
                raise failed
            if time.monotonic() - started >= timeout:
                events = "; ".join(self.object_events(handle)[-3:]) or "none"
                raise InjectionTimeout(
                    f"{handle.kind} {handle.namespace}/{handle.name} not injected after {timeout:g}s "
                    f"(conditions {conditions(last) or (last.get('status') or {}).get('phase')}; events: {events}); "
                    "the fault cannot be shown to have been active"
                )
            self._sleep(self.poll_interval)

    def _apply_failed(self, handle: FaultHandle, obj: dict[str, Any]) -> InjectionFailed | None:
        """InjectionFailed, with the controller's own message, once a record's Apply has failed
        `apply_failure_limit` times in a row; None while no record has."""
        failures = [
            f for f in kind_of_plural(handle.plural).apply_failures(obj) if f.attempts >= self.apply_failure_limit
        ]
        if not failures:
            return None
        first = failures[0]
        others = f" (and {len(failures) - 1} other target(s))" if len(failures) > 1 else ""
        return InjectionFailed(
            f"{handle.kind} {handle.namespace}/{handle.name} failed to inject: "
            f"{netsafe.printable(first.message)[:300] or 'no message'} "
            f"(target {netsafe.printable(first.target)[:200]}: {first.attempts} failed Apply attempts in a row"
            f"{others}; Chaos Mesh keeps retrying, AllInjected {conditions(obj).get('AllInjected') or 'unset'}); "
            "the fault cannot be shown to have been active"
        )

    def handle_of(self, item: Manifest | FaultBase) -> FaultHandle:
        """The handle of an object applied earlier (by an earlier stage's task), found by its deterministic name."""
        return fault_handle(self.manifest_of(item), "")

    def is_active(self, handle: FaultHandle) -> bool:
        """Whether the fault is verifiably active now. Chaos Mesh's condition controller sets `AllInjected` True
        only while every record's phase is Injected (chaos-mesh/chaos-mesh controllers/common/condition/
        controller.go, diffConditions); its desired-phase controller sets `status.experiment.desiredPhase` to Stop
        once the object is deleted, paused or past creation + duration (controllers/common/desiredphase/
        controller.go, CalcDesiredPhase; `DurationExceeded` is generated into api/v1alpha1 by
        cmd/chaos-builder). Records are recovered only after that, so AllInjected alone can still read True for
        a fault that has already been told to stop: both are required. A one-shot kind (pod-kill) stays Run
        by design, so its AllInjected is its whole activity."""
        obj = self.kube.get(handle)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        kind = kind_of_plural(handle.plural)
        if not kind.is_active(obj):
            return False
        if handle.one_shot or not kind.has_records:
            return True  # a kill was the fault: its target is expected to be gone or restarted
        # Chaos Mesh keeps AllInjected True on the records it made once, whatever became of their pods
        # (kfchaos.faults.chaosrecords): a fault whose recorded pods were replaced hits nothing.
        problems = self.target_problems(obj)
        if problems:
            where = f"{handle.kind} {handle.namespace}/{handle.name}"
            raise TargetsGone(f"{where} is not hitting a live target: " + "; ".join(problems))
        return True

    def target_problems(self, obj: dict[str, Any], one_shot: bool = False) -> list[str]:
        """Why the object's records do not show it hitting live, intended targets (empty when they do): each
        recorded pod must still be the pod that was injected (not for a one-shot kill, whose pod-kill deletes
        it: controllers/chaosimpl/podchaos/podkill/impl.go), and a container kind's record must name the
        intended container (kfchaos.faults.chaosrecords)."""
        records = parse_records(obj)
        spec = obj.get("spec") or {}
        wanted = [str(c) for c in spec.get("containerNames") or []]
        created = _created(obj) if (obj.get("metadata") or {}).get("creationTimestamp") else None
        problems: list[str] = []
        for record in records:
            pod = self.kube.pod(record.namespace, record.pod)
            reason = None if one_shot else stale_reason(record, pod, created)
            if reason is None and selects_containers(str(obj.get("kind")), spec.get("action")):
                reason = wrong_container(record, pod, wanted)
            if reason is not None:
                problems.append(reason)
        return problems

    def object_events(self, handle: FaultHandle) -> list[str]:
        """`reason: message` of the Kubernetes events about the object (why Chaos Mesh could not inject)."""
        return self.kube.object_events(handle.namespace, handle.name)

    def remove(self, handle: FaultHandle) -> None:
        self.kube.delete(handle.plural, handle.namespace, handle.name)

    def wait_recovered(self, handle: FaultHandle, timeout: float | None = None) -> None:
        """Until the object is gone (its finalizer ran), or AllRecovered True, Paused False and desiredPhase Stop.
        `timeout` defaults to the backend's recover_timeout."""
        timeout = self.recover_timeout if timeout is None else timeout
        kind = kind_of_plural(handle.plural)
        started = time.monotonic()
        while True:
            current = self.kube.get(handle)
            if current is None or kind.recovered(handle, current):
                return
            if time.monotonic() - started >= timeout:
                release = kind.release_command(handle.plural, current)
                remedy = f"; {STUCK_REMEDY}: {release}" if release is not None else ""
                raise RecoveryTimeout(
                    f"{handle.kind} {handle.namespace}/{handle.name} not recovered after {timeout:g}s "
                    f"(conditions {conditions(current)}); Chaos Mesh's finalizer may be stuck{remedy}"
                )
            self._sleep(self.poll_interval)

    def server_time(self, namespace: str | None = None) -> float:
        """The API server's clock (POSIX seconds): KubeClient.server_time."""
        return self.kube.server_time(namespace)

    def sweep(
        self,
        run_id: str | None,
        namespaces: list[str] | None = None,
        older_than: float | None = None,
        timeout: float = 60.0,
    ) -> int:
        """Delete every kfchaos object of run `run_id` (None: of any run, with `older_than`) in `namespaces`
        (None: those of the bound experiment, or all namespaces), then wait until they are gone.
        Returns how many objects were deleted."""
        namespaces = namespaces if namespaces is not None else self.experiment_namespaces()
        if run_id is None and older_than is None:
            raise BackendError("sweep needs a run id, or older_than to sweep every run's leftovers")
        # `is not None`, never truthiness: an empty run id is refused (run_selector), not taken for "every run".
        selector = run_selector(run_id) if run_id is not None else f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        # One deadline for the whole call: every request's timeout and every retry is cut to what is left of it.
        with self.kube.deadline(timeout):
            return self._sweep(run_id, namespaces, older_than, timeout, selector)

    def sweep_at_target(self, run_id: str, timeout: float = 60.0) -> TargetSweep:
        """A takeover's sweep: run `run_id`'s objects in the bound experiment's namespaces (as `sweep`), but only
        those that can reach the bound experiment's target, the one its lease guards; the others are left and
        named. A Lease naming a run is evidence that the run held this target, never that its objects elsewhere
        are dead: anyone who may update Leases can copy kfchaos's record onto one (docs/reliability.md, round 4,
        class 1), and that run may be injecting at another target now."""
        if self.experiment is None:
            raise BackendError("a takeover's sweep needs an experiment run bound: its target says what to sweep")
        target = self.experiment.spec.target
        aimed = pod_selector(target.namespace, target.selector)
        with self.kube.deadline(timeout):
            running = self.kube.list_objects("pods", target.namespace, label_selector(aimed)) or []
            reach = _Reach([described_pod(aimed), *running])
            deleted = self._sweep(run_id, self.experiment_namespaces(), None, timeout, run_selector(run_id), reach)
        return TargetSweep(deleted, sorted(reach.kept))

    def _sweep(
        self,
        run_id: str | None,
        namespaces: list[str] | None,
        older_than: float | None,
        timeout: float,
        selector: str,
        chosen: Callable[[str, dict[str, Any]], bool] = lambda plural, obj: True,
    ) -> int:
        # Ages by the server's clock, as creationTimestamp is: a local clock ahead of the server's would
        # otherwise make other runs' live faults look old and sweep them.
        cutoff = None if older_than is None else self.server_time(namespaces[0] if namespaces else None) - older_than
        deleted = 0
        for namespace in namespaces or [None]:  # type: ignore[list-item]
            for plural in SWEPT_PLURALS:
                for obj in self.kube.list_objects(plural, namespace, selector) or []:
                    if (cutoff is not None and _created(obj) > cutoff) or not chosen(plural, obj):
                        continue
                    meta = obj["metadata"]
                    if meta.get("deletionTimestamp"):
                        continue  # already going; waited for below
                    if self.kube.delete(plural, meta["namespace"], meta["name"]):
                        deleted += 1
        left: list[tuple[str, dict[str, Any]]] = []
        while True:
            try:
                left = [
                    (plural, o)
                    for namespace in namespaces or [None]  # type: ignore[list-item]
                    for plural in SWEPT_PLURALS
                    for o in self.kube.list_objects(plural, namespace, selector) or []
                    if (cutoff is None or _created(o) <= cutoff) and chosen(plural, o)
                ]
            except BackendError:
                if self.kube.time_left() or not left:
                    raise
                # The deadline passed mid-listing: report what the last complete listing showed.
            else:
                if not left:
                    return deleted
            if not self.kube.time_left():
                objects = [_terminating(plural, o) for plural, o in left]
                releases = [kind_of_plural(plural).release_command(plural, o) for plural, o in left]
                commands = [command for command in releases if command is not None]
                if all(kind_of_plural(plural).never_injected(o) for plural, o in left):
                    raise LeftNeverInjected(timeout, objects, commands)
                raise StuckTerminating(timeout, objects, commands)
            self._sleep(self.kube.capped(self.poll_interval))


# ---------------------------------------------------------------- helpers


class _Reach:
    """Whether a swept object can reach one of the target's `pods` (kfchaos.faults.foreign.object_reaches, the rule
    the foreign-interference watch uses); the objects that cannot are collected in `kept`."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.kept: set[str] = set()

    def __call__(self, plural: str, obj: dict[str, Any]) -> bool:
        aimed = _allocator_aim(obj) if plural == "pods" else obj
        if any(object_reaches(aimed, pod) for pod in self.pods):
            return True
        meta = obj.get("metadata") or {}
        self.kept.add(f"{plural} {meta.get('namespace')}/{meta.get('name')}")
        return False


def _allocator_aim(pod: dict[str, Any]) -> dict[str, Any]:
    """A GPU allocator pod as a chaos object aimed at the pods it lands beside: its pod-affinity term, which
    kfchaos.faults.gpu.render_gpu_pod writes from the fault's selector and namespace."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [{}]
    term = terms[0] if isinstance(terms[0], dict) else {}
    labels = term.get("labelSelector") or {}
    selector = {"namespaces": term.get("namespaces") or [], "labelSelectors": labels.get("matchLabels") or {},
                "expressionSelectors": labels.get("matchExpressions") or []}  # fmt: skip
    return {"metadata": pod.get("metadata") or {}, "spec": {"selector": selector if term else None}}


def _terminating(plural: str, obj: dict[str, Any]) -> str:
    """One object a sweep could not see gone, and why, for StuckTerminating."""
    meta = obj.get("metadata") or {}
    where = f"{plural} {meta.get('namespace')}/{meta.get('name')}"
    if not meta.get("deletionTimestamp"):
        return f"{where} (not deleted yet)"
    finalizers = meta.get("finalizers") or []
    pending = [r for r in raw_records(obj) if r.get("phase") != "Not Injected"]
    never = [str(r.get("id")) for r in pending if never_injected(r)]
    unrecovered = [str(r.get("id")) for r in pending if not never_injected(r)]
    why = f"Terminating since {meta.get('deletionTimestamp')}, finalizers {finalizers}"
    if unrecovered:
        why += f", records not recovered: {', '.join(unrecovered)}"
    if never:
        why += f", records never injected (their Apply retried): {', '.join(never)}"
    return f"{where} ({why})"


def _first_container_problem(manifest: Manifest, pods: list[dict[str, Any]]) -> str | None:
    """A container kind without containerNames lands on each pod's first container
    (pkg/selector/container/selector.go: `pod.Spec.Containers[0]`): refused where a target pod has several,
    since the first may be a sidecar rather than the model server."""
    spec = manifest.get("spec") or {}
    if manifest["kind"] not in PLURALS or not selects_containers(manifest["kind"], spec.get("action")):
        return None
    if spec.get("containerNames"):
        return None
    for pod in pods:
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if len(names) > 1:
            return (
                f"{manifest['kind']} {manifest['metadata']['name']}: without containers, Chaos Mesh injects each "
                f"pod's first container, and pod {pod['metadata']['name']} has {names}: it would hit {names[0]!r}, "
                "which may be a sidecar. Name the container in the fault's `containers` (e.g. the model server's)"
            )
    return None


def _created(obj: dict[str, Any]) -> float:
    stamp = obj["metadata"].get("creationTimestamp")
    if isinstance(stamp, datetime):
        return stamp.timestamp()
    if not stamp:
        return 0.0
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
