"""Chaos Mesh behaviours kfchaos depends on, as scenarios that run against any Kubernetes API: the loopback
fake (tests/contract/test_fake.py) and the real kube-apiserver + KWOK + Chaos Mesh controller-manager
(tests/cluster/test_contract_real.py). Where the two differed, the real outcome is the one asserted.

Each scenario takes a `Cluster`: a `kubernetes.client.ApiClient`, a namespace it may create pods and chaos
objects in, and what the scenario cannot do through the API alone (`pod_spec`: fields a pod needs to be
scheduled there, e.g. KWOK node tolerations; `stall_recovery`: make a chaos object's recovery impossible).
Everything else goes through the API: pods are created and deleted with CoreV1Api, objects through kfchaos's
own backend (kfchaos.faults.chaosmesh), so the same assertions hold for fake and real. No back door into the
fake's state is used.

Upstream behaviours asserted (chaos-mesh/chaos-mesh v2.8.x):
- targets are selected once (controllers/common/records/controller.go, `if records == nil`) and AllInjected
  stays True on records of pods that are gone; kfchaos must not count such a fault as active;
- a ContainerSelector without containerNames records `ns/pod/<Containers[0]>`
  (pkg/selector/container/selector.go); kfchaos must not report that as injected into a multi-container pod;
- `chaos-mesh/records` is added after the create, never in its response nor on a dry run, and removed only
  when every record is "Not Injected" or `chaos-mesh.chaos-mesh.org/cleanFinalizer: forced` is set
  (controllers/common/finalizers/controller.go), the annotation being read only while no Recover fails
  (controllers/common/pipeline/pipeline.go stops at the records step's requeue);
- the validating webhooks admit or refuse each case of ADMISSION_CASES as kfchaos.faultspec.admission.verdict
  says (api/v1alpha1/*_webhook.go, go-units v0.5.0).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kfchaos.faults.activity import FaultActivity, Poller, coverage
from kfchaos.faults.backend import (
    CLEAN_FINALIZER_ANNOTATION,
    BackendError,
    FaultHandle,
    InjectionTimeout,
    LeftNeverInjected,
    StuckTerminating,
)
from kfchaos.faults.catalog import API_VERSION, CATALOG, GROUP, PLURALS, VERSION
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.chaosrecords import parse_records
from kfchaos.faults.naming import run_labels
from kfchaos.faults.render import render_experiment
from kfchaos.faults.retry import RetryPolicy
from kfchaos.faultspec import admission
from tests.faults.experiments import experiment_with

FINALIZER = "chaos-mesh/records"
WAIT = 60.0  # the most any wait in a scenario takes (a bound, never an assertion about speed)


@dataclass
class Cluster:
    api: kubernetes.client.ApiClient
    namespace: str
    # Extra pod spec fields (nodeSelector, tolerations) so pods run there; {} for the fake.
    pod_spec: dict[str, Any] = field(default_factory=dict)
    # (namespace, name) -> make that chaos object's Recover keep failing, as with chaos-daemon gone, while the
    # controller keeps running; may return a callable that undoes the stall, called at the end. Fake:
    # KubeApiServer.stall_recovery. Real: tests/cluster/test_contract_real.py refuses the controller's updates of
    # the target pods with a ValidatingAdmissionPolicy.
    stall_recovery: Callable[[str, str], Callable[[], None] | None] | None = None
    poll: float = 0.05

    def backend(self) -> ChaosMeshBackend:
        return ChaosMeshBackend(
            self.api,
            retry=RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.2),
            poll_interval=self.poll,
            request_timeout=10,
            placement_checks=False,
        )


# ---------------------------------------------------------------- helpers (API calls only)


def _wait(what: str, probe: Callable[[], Any], limit: float = WAIT, poll: float = 0.05) -> Any:
    deadline = time.monotonic() + limit
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"gave up after {limit:g}s waiting for {what}")
        time.sleep(poll)


def _core(cluster: Cluster) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(cluster.api)


def _custom(cluster: Cluster) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(cluster.api)


def make_pod(cluster: Cluster, name: str, labels: dict[str, str], containers: tuple[str, ...] = ("server",)) -> None:
    """Create a pod and wait until it runs."""
    spec = {"containers": [{"name": c, "image": "registry.k8s.io/pause:3.10"} for c in containers]}
    spec.update(copy.deepcopy(cluster.pod_spec))
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}
    _core(cluster).create_namespaced_pod(cluster.namespace, body)
    _wait(f"pod {name} Running", lambda: _pod(cluster, name).get("status", {}).get("phase") == "Running")


def _pod(cluster: Cluster, name: str) -> dict[str, Any]:
    try:
        pod = _core(cluster).read_namespaced_pod(name, cluster.namespace)
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return dict(cluster.api.sanitize_for_serialization(pod))


def delete_pod(cluster: Cluster, name: str) -> None:
    """Delete a pod at once and wait until it is gone (as a rollout, an eviction or a pod-kill does)."""
    _core(cluster).delete_namespaced_pod(name, cluster.namespace, grace_period_seconds=0)
    _wait(f"pod {name} gone", lambda: not _pod(cluster, name))


def _get(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    try:
        return dict(_custom(cluster).get_namespaced_custom_object(GROUP, VERSION, cluster.namespace, plural, name))
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def chaos(
    cluster: Cluster, kind: str, name: str, labels: dict[str, str], run_id: str, spec: dict[str, Any]
) -> dict[str, Any]:
    """A chaos-mesh.org object as kfchaos renders one: run labels, one namespace, an explicit duration."""
    body = {
        "mode": "all",
        "selector": {"namespaces": [cluster.namespace], "labelSelectors": dict(labels)},
        "duration": "10m",
        **spec,
    }
    meta = {"name": name, "namespace": cluster.namespace, "labels": run_labels("contract", run_id, "1")}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": body}


def _targets(cluster: Cluster, plural: str, name: str) -> list[str]:
    return [r.target for r in parse_records(_get(cluster, plural, name))]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _observe(backend: ChaosMeshBackend, handle: FaultHandle) -> FaultActivity:
    """One Poller observation, as a stage's fault watcher takes it."""
    activity = FaultActivity("f", handle.name, handle.kind, [50], applied_at=None)
    Poller([activity], lambda _: backend.is_active(handle), interval=1.0).poll_once()
    return activity


# ---------------------------------------------------------------- scenarios


def pick_once_after_pod_replacement(cluster: Cluster) -> None:
    """A pod-failure on one pod; the pod is replaced by a new one (new name, as a ReplicaSet does). Chaos Mesh
    keeps its record of the old pod and AllInjected True, never injects the new pod; kfchaos sees the fault
    hitting nothing, so a stage watched after the replacement is not covered."""
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("pick")}
    old, new = _unique("old"), _unique("new")
    make_pod(cluster, old, labels)
    run_id = _unique("run")
    manifest = chaos(cluster, "PodChaos", _unique("failure"), labels, run_id, {"action": "pod-failure"})
    before = math.floor(time.time())
    handle = backend.apply(manifest)
    try:
        report = backend.wait_injected(handle, timeout=WAIT)
        assert report.targets == [f"{cluster.namespace}/{old}"], report.targets
        # The injection time is the record's Apply event (whole seconds on the loopback clock), not the poll's.
        assert report.injected_at is not None and report.injected_at.is_integer(), report.injected_at
        assert before <= report.injected_at <= time.time(), (before, report.injected_at)
        assert backend.is_active(handle) is True
        delete_pod(cluster, old)
        make_pod(cluster, new, labels)
        obj = _get(cluster, "podchaos", handle.name)
        ids = [r.target for r in parse_records(obj)]
        assert ids == [f"{cluster.namespace}/{old}"], f"targets must be picked once; records now {ids}"
        conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert conditions.get("AllInjected") == "True", conditions  # upstream keeps it on the old records
        seen = _observe(backend, handle)
        assert seen.observations[-1][1] is False, "a fault whose recorded pod is gone must not count as active"
        assert any("gone" in e for e in seen.errors), seen.errors
        assert not coverage(seen, (seen.observations[0][0], seen.observations[0][0])).ok
    finally:
        backend.sweep(run_id, [cluster.namespace], timeout=WAIT)
        for pod in (old, new):
            if _pod(cluster, pod):
                delete_pod(cluster, pod)


def pod_kill_records_the_killed_pod(cluster: Cluster) -> None:
    """pod-kill deletes its target and records it `ns/pod`, Injected (controllers/chaosimpl/podchaos/podkill/
    impl.go); the kill is the whole fault, so kfchaos counts it injected and active with its target gone, and
    a pod that appears afterwards is not in the records."""
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("kill")}
    victim, later = _unique("victim"), _unique("later")
    make_pod(cluster, victim, labels)
    run_id = _unique("run")
    manifest = chaos(cluster, "PodChaos", _unique("kill"), labels, run_id, {"action": "pod-kill"})
    del manifest["spec"]["duration"]
    handle = backend.apply(manifest)
    try:
        assert handle.one_shot
        report = backend.wait_injected(handle, timeout=WAIT)
        assert report.targets == [f"{cluster.namespace}/{victim}"], report.targets
        _wait(f"pod {victim} killed", lambda: not _pod(cluster, victim))
        make_pod(cluster, later, labels)
        assert _targets(cluster, "podchaos", handle.name) == [f"{cluster.namespace}/{victim}"]
        assert backend.is_active(handle) is True
    finally:
        backend.sweep(run_id, [cluster.namespace], timeout=WAIT)
        if _pod(cluster, later):
            delete_pod(cluster, later)


def pick_once_same_name_replacement(cluster: Cluster) -> None:
    """As above, with the replacement taking the old pod's name (as a StatefulSet's does): the record still
    matches by name, and kfchaos tells the new pod from the injected one by its creation time."""
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("same")}
    name = _unique("sts")
    make_pod(cluster, name, labels)
    run_id = _unique("run")
    manifest = chaos(cluster, "PodChaos", _unique("failure"), labels, run_id, {"action": "pod-failure"})
    handle = backend.apply(manifest)
    try:
        backend.wait_injected(handle, timeout=WAIT)
        (record,) = parse_records(_get(cluster, "podchaos", handle.name))
        assert record.injected_at is not None, "upstream records carry an Apply event with a timestamp"
        delete_pod(cluster, name)
        # Timestamps have one-second resolution: recreate once the server's clock is past the injection second.
        injected = record.injected_at
        _wait("the server clock past the injection", lambda: backend.server_time(cluster.namespace) > injected + 1)
        make_pod(cluster, name, labels)
        seen = _observe(backend, handle)
        assert seen.observations[-1][1] is False, "a same-name replacement is not the injected pod"
        assert any("new pod of the same name" in e for e in seen.errors), seen.errors
    finally:
        backend.sweep(run_id, [cluster.namespace], timeout=WAIT)
        if _pod(cluster, name):
            delete_pod(cluster, name)


def container_records_first_container(cluster: Cluster) -> None:
    """A StressChaos on a pod whose first container is a sidecar: without containerNames Chaos Mesh records
    `ns/pod/sidecar`; with them, the named container. kfchaos never reports the unnamed one injected (on a
    cluster without chaos-daemon neither is injected at all, which it must not report either), and preflight
    refuses it before anything is created."""
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("ctr")}
    pod = _unique("two")
    make_pod(cluster, pod, labels, containers=("sidecar", "server"))
    run_id = _unique("run")
    stress = {"stressors": {"cpu": {"workers": 1, "load": 10}}}
    unnamed = chaos(cluster, "StressChaos", _unique("first"), labels, run_id, stress)
    named = chaos(cluster, "StressChaos", _unique("named"), labels, run_id, {**stress, "containerNames": ["server"]})
    try:
        try:
            backend.preflight([unnamed])
        except BackendError as exc:
            assert "first container" in str(exc) and "sidecar" in str(exc), str(exc)
        else:
            raise AssertionError("preflight must refuse a container fault on a multi-container pod without names")
        for manifest, container in ((unnamed, "sidecar"), (named, "server")):
            handle = backend.apply(manifest)
            ids = _wait(
                "records", lambda h=handle: [r.target for r in parse_records(_get(cluster, "stresschaos", h.name))]
            )
            assert ids == [f"{cluster.namespace}/{pod}/{container}"], ids
        first = backend.handle_of(unnamed)
        try:
            backend.wait_injected(first, timeout=2.0)
        except InjectionTimeout:
            pass
        else:
            raise AssertionError("a fault that landed on the sidecar must not be reported injected")
    finally:
        backend.sweep(run_id, [cluster.namespace], timeout=WAIT)
        delete_pod(cluster, pod)


def finalizer_added_after_create(cluster: Cluster) -> None:
    """`chaos-mesh/records` is in neither the dry run's nor the create's response; the controller adds it
    afterwards; a normal delete then goes through once the records are recovered."""
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("fin")}
    pod = _unique("fin")
    make_pod(cluster, pod, labels)
    run_id = _unique("run")
    manifest = chaos(cluster, "PodChaos", _unique("failure"), labels, run_id, {"action": "pod-failure"})
    custom = _custom(cluster)
    try:
        dry = custom.create_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, "podchaos", manifest, dry_run="All"
        )
        assert FINALIZER not in (dry["metadata"].get("finalizers") or []), dry["metadata"]
        created = custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, "podchaos", manifest)
        assert FINALIZER not in (created["metadata"].get("finalizers") or []), created["metadata"]
        name = manifest["metadata"]["name"]
        _wait(
            "the controller's finalizer",
            lambda: FINALIZER in (_get(cluster, "podchaos", name).get("metadata", {}).get("finalizers") or []),
        )
        backend.wait_injected(backend.handle_of(manifest), timeout=WAIT)
        assert backend.sweep(run_id, [cluster.namespace], timeout=WAIT) == 1
        assert not _get(cluster, "podchaos", name)
    finally:
        backend.sweep(run_id, [cluster.namespace], timeout=WAIT)
        delete_pod(cluster, pod)


def _recover_failures_after(obj: dict[str, Any], after: float) -> int:
    """How many "Failed Recover" record events carry a timestamp past `after` (POSIX seconds)."""
    records = ((obj.get("status") or {}).get("experiment") or {}).get("containerRecords") or []
    count = 0
    for record in records:
        for event in record.get("events") or []:
            if event.get("type") != "Failed" or event.get("operation") != "Recover":
                continue
            stamp = datetime.datetime.fromisoformat(str(event.get("timestamp")).replace("Z", "+00:00"))
            count += stamp.timestamp() > after
    return count


def finalizer_stuck_then_released(cluster: Cluster) -> None:
    """A fault whose recovery cannot complete stays Terminating; `kfchaos cleanup` (the sweep) says so within
    its deadline with the command that releases it. The cleanFinalizer=forced annotation does NOT release it
    while recovery keeps failing: the controller's records step asks to requeue after a failed Recover and the
    pipeline stops there, before the finalizers' clean step that reads the annotation
    (controllers/common/step.go, pipeline/pipeline.go, records/controller.go `needRetry`). Removing the
    finalizer, the command kfchaos gives, lets it go."""
    assert cluster.stall_recovery is not None, "this scenario needs a way to make recovery fail"
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("stuck")}
    pod = _unique("stuck")
    make_pod(cluster, pod, labels)
    run_id = _unique("run")
    manifest = chaos(cluster, "PodChaos", _unique("failure"), labels, run_id, {"action": "pod-failure"})
    name = manifest["metadata"]["name"]
    resume: Callable[[], None] | None = None
    release = {"metadata": {"finalizers": None}}
    try:
        handle = backend.apply(manifest)
        backend.wait_injected(handle, timeout=WAIT)
        resume = cluster.stall_recovery(cluster.namespace, name)
        try:
            backend.sweep(run_id, [cluster.namespace], timeout=3.0)
        except StuckTerminating as exc:
            message = str(exc)
        else:
            raise AssertionError("a fault whose recovery cannot complete must not be reported removed")
        assert f"podchaos {cluster.namespace}/{name}" in message and "Terminating" in message, message
        command = (
            f"kubectl patch podchaos.{GROUP} -n {cluster.namespace} {name} --type=merge "
            """-p '{"metadata":{"finalizers":null}}'"""
        )
        assert command in message and "forced" in message, message
        obj = _get(cluster, "podchaos", name)
        assert obj["metadata"].get("deletionTimestamp") and FINALIZER in obj["metadata"]["finalizers"]
        assert any(r.phase != "Not Injected" for r in parse_records(obj))
        # forced: the controller reconciles the annotated object, fails its Recover again, and keeps the object.
        patch = {"metadata": {"annotations": {CLEAN_FINALIZER_ANNOTATION: "forced"}}}
        _custom(cluster).patch_namespaced_custom_object(GROUP, VERSION, cluster.namespace, "podchaos", name, patch)
        annotated = backend.server_time(cluster.namespace)
        _wait(
            "a failed Recover after the annotation",
            lambda: _recover_failures_after(_get(cluster, "podchaos", name), annotated + 1),
        )
        obj = _get(cluster, "podchaos", name)
        assert obj and FINALIZER in obj["metadata"]["finalizers"], "forced is not read while Recover fails"
        # The remedy kfchaos gives: the finalizer removed; the API server then deletes the object.
        _custom(cluster).patch_namespaced_custom_object(GROUP, VERSION, cluster.namespace, "podchaos", name, release)
        _wait("the released object gone", lambda: not _get(cluster, "podchaos", name))
        assert backend.sweep(run_id, [cluster.namespace], timeout=WAIT) == 0
    finally:
        if resume is not None:
            resume()
        if _get(cluster, "podchaos", name):
            _custom(cluster).patch_namespaced_custom_object(
                GROUP, VERSION, cluster.namespace, "podchaos", name, release
            )
        delete_pod(cluster, pod)


def never_injected_stays_terminating(cluster: Cluster) -> None:
    """Faults whose Apply through chaos-daemon keeps failing (the target's node runs none: "cannot find daemonIP"),
    deleted. A StressChaos's failed Apply leaves its record "Not Injected" (controllers/chaosimpl/stresschaos/
    impl.go), so the finalizer goes and the object with it. A NetworkChaos waits for its PodNetworkChaos in
    "Not Injected/Wait" (networkchaos/trafficcontrol/impl.go `waitForApplySync`), and desiredPhase Stop on such a
    record is another Apply, not a Recover (controllers/common/records/controller.go): it keeps failing and the
    object stays Terminating. kfchaos's sweep says so as LeftNeverInjected (the run is still judged, never PASS),
    with the command that releases it; that command lets it go."""
    backend = cluster.backend()
    labels = {"kfchaos-contract": _unique("never")}
    pod = _unique("never")
    make_pod(cluster, pod, labels)
    run_id = _unique("run")
    delay = chaos(
        cluster, "NetworkChaos", _unique("delay"), labels, run_id, {"action": "delay", "delay": {"latency": "50ms"}}
    )
    stress = chaos(cluster, "StressChaos", _unique("stress"), labels, run_id, {"stressors": CPU["stressors"]})
    names = {"networkchaos": delay["metadata"]["name"], "stresschaos": stress["metadata"]["name"]}
    release = {"metadata": {"finalizers": None}}
    try:
        for manifest in (delay, stress):
            backend.apply(manifest)
        for plural, name in names.items():
            _wait(f"{plural} {name}'s failed Apply", lambda p=plural, n=name: _failed_applies(_get(cluster, p, n)))
        phases = {p: {r.get("phase") for r in _records(_get(cluster, p, n))} for p, n in names.items()}
        assert phases == {"networkchaos": {"Not Injected/Wait"}, "stresschaos": {"Not Injected"}}, phases
        try:
            backend.sweep(run_id, [cluster.namespace], timeout=5.0)
        except LeftNeverInjected as exc:
            message = exc.reason
        else:
            raise AssertionError("a NetworkChaos that never injected is not released by Chaos Mesh")
        assert not _get(cluster, "stresschaos", names["stresschaos"]), "its finalizer goes with its records"
        obj = _get(cluster, "networkchaos", names["networkchaos"])
        assert obj["metadata"].get("deletionTimestamp") and FINALIZER in obj["metadata"]["finalizers"]
        assert all(not int(r.get("injectedCount") or 0) for r in _records(obj)), _records(obj)
        command = (
            f"kubectl patch networkchaos.{GROUP} -n {cluster.namespace} {names['networkchaos']} --type=merge "
            """-p '{"metadata":{"finalizers":null}}'"""
        )
        assert "never injected" in message and command in message, message
        _custom(cluster).patch_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, "networkchaos", names["networkchaos"], release
        )
        _wait("the released object gone", lambda: not _get(cluster, "networkchaos", names["networkchaos"]))
        assert backend.sweep(run_id, [cluster.namespace], timeout=WAIT) == 0
    finally:
        for plural, name in names.items():
            if _get(cluster, plural, name):
                _custom(cluster).patch_namespaced_custom_object(
                    GROUP, VERSION, cluster.namespace, plural, name, release
                )
                with contextlib.suppress(ApiException):
                    _custom(cluster).delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, plural, name)
        delete_pod(cluster, pod)


def _records(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return ((obj.get("status") or {}).get("experiment") or {}).get("containerRecords") or []


def _failed_applies(obj: dict[str, Any]) -> bool:
    """Whether every record of `obj` has a failed Apply among its events."""
    records = _records(obj)
    return bool(records) and all(
        any(e.get("type") == "Failed" and e.get("operation") == "Apply" for e in r.get("events") or []) for r in records
    )


# ---------------------------------------------------------------- admission


def _case(kind: str, spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return kind, {"mode": "all", "selector": {"labelSelectors": {"app": "contract"}}, "duration": "1m", **spec}


CPU = {"stressors": {"cpu": {"workers": 1}}}
# (label, kind, spec): each is admitted or refused as admission.verdict says; the label says which rule.
ADMISSION_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("pod-kill", *_case("PodChaos", {"action": "pod-kill"})),
    ("pod-failure", *_case("PodChaos", {"action": "pod-failure"})),
    ("container-kill with names", *_case("PodChaos", {"action": "container-kill", "containerNames": ["s"]})),
    ("container-kill without names", *_case("PodChaos", {"action": "container-kill"})),
    ("duration 90s", *_case("PodChaos", {"action": "pod-failure", "duration": "90s"})),
    ("duration with a space", *_case("PodChaos", {"action": "pod-failure", "duration": "1h 2m"})),
    ("duration in days", *_case("PodChaos", {"action": "pod-failure", "duration": "1d"})),
    ("duration negative", *_case("PodChaos", {"action": "pod-failure", "duration": "-5m"})),
    ("duration empty", *_case("PodChaos", {"action": "pod-failure", "duration": ""})),
    ("fixed 1", *_case("PodChaos", {"action": "pod-failure", "mode": "fixed", "value": "1"})),
    ("fixed 1.0", *_case("PodChaos", {"action": "pod-failure", "mode": "fixed", "value": "1.0"})),
    ("fixed-percent 12.5", *_case("PodChaos", {"action": "pod-failure", "mode": "fixed-percent", "value": "12.5"})),
    ("fixed-percent +50", *_case("PodChaos", {"action": "pod-failure", "mode": "fixed-percent", "value": "+50"})),
    ("memory 512Mi", *_case("StressChaos", {"stressors": {"memory": {"workers": 1, "size": "512Mi"}}})),
    ("memory 512MiB", *_case("StressChaos", {"stressors": {"memory": {"workers": 1, "size": "512MiB"}}})),
    ("memory 1g", *_case("StressChaos", {"stressors": {"memory": {"workers": 1, "size": "1g"}}})),
    ("memory bare 512", *_case("StressChaos", {"stressors": {"memory": {"workers": 1, "size": "512"}}})),
    ("memory 80.5%", *_case("StressChaos", {"stressors": {"memory": {"workers": 1, "size": "80.5%"}}})),
    ("memory 101%", *_case("StressChaos", {"stressors": {"memory": {"workers": 1, "size": "101%"}}})),
    ("workers 0", *_case("StressChaos", {"stressors": {"cpu": {"workers": 0}}})),
    ("workers -1", *_case("StressChaos", {"stressors": {"cpu": {"workers": -1}}})),
    ("workers 8192", *_case("StressChaos", {"stressors": {"cpu": {"workers": 8192}}})),
    ("workers 8193", *_case("StressChaos", {"stressors": {"cpu": {"workers": 8193}}})),
    ("no stressors", *_case("StressChaos", {"stressors": {}})),
    ("cpu stress", *_case("StressChaos", CPU)),
    ("time offset -5m", *_case("TimeChaos", {"timeOffset": "-5m"})),
    ("time offset 5 minutes", *_case("TimeChaos", {"timeOffset": "5 minutes"})),
    ("delay 100ms", *_case("NetworkChaos", {"action": "delay", "delay": {"latency": "100ms"}})),
    ("delay 1h 2m", *_case("NetworkChaos", {"action": "delay", "delay": {"latency": "1h 2m"}})),
    ("loss 1e39", *_case("NetworkChaos", {"action": "loss", "loss": {"loss": "1e39"}})),
    ("loss 25", *_case("NetworkChaos", {"action": "loss", "loss": {"loss": "25"}})),
    (
        "bandwidth 1.5mbps",
        *_case("NetworkChaos", {"action": "bandwidth", "bandwidth": {"rate": "1.5mbps", "limit": 1, "buffer": 1}}),
    ),
    ("direction both no target",
     *_case("NetworkChaos", {"action": "delay", "delay": {"latency": "1ms"}, "direction": "both"})),
    ("http abort", *_case("HTTPChaos", {"target": "Request", "port": 80, "abort": True})),
    ("http method get", *_case("HTTPChaos", {"target": "Request", "port": 80, "method": "get", "abort": True})),
    ("http delay 1h 2m", *_case("HTTPChaos", {"target": "Request", "port": 80, "delay": "1h 2m"})),
    ("io fault errno 5", *_case("IOChaos", {"action": "fault", "volumePath": "/d", "errno": 5})),
    ("io latency 1h 2m", *_case("IOChaos", {"action": "latency", "volumePath": "/d", "delay": "1h 2m"})),
]  # fmt: skip


# One minimal fault of every cluster-side catalog type, as `kfchaos render` writes it.
MINIMAL_PARAMS: dict[str, dict[str, Any]] = {
    "network-delay": {"latency": "100ms"}, "network-loss": {"loss": "10%"},
    "network-duplicate": {"duplicate": "10%"}, "network-corrupt": {"corrupt": "10%"},
    "network-bandwidth": {"rate": "10mbps", "limit": 100, "buffer": 100},
    "network-partition": {"external_targets": ["10.0.0.1"]},
    "stress-memory": {"size": "256MB"}, "http-abort": {"port": 80}, "http-delay": {"port": 80, "delay": "1s"},
    "http-replace": {"port": 80, "replace_code": 503}, "io-latency": {"volume_path": "/d", "delay": "10ms"},
    "io-fault": {"volume_path": "/d", "errno": 5}, "io-attr-override": {"volume_path": "/d", "perm": 420},
    "io-mistake": {"volume_path": "/d"},
    "time-offset": {"offset": "-5m"}, "dns-error": {"patterns": ["*"]}, "dns-random": {"patterns": ["*"]},
}  # fmt: skip


def minimal_fault(fault_type: str) -> dict[str, Any]:
    fault: dict[str, Any] = {"name": "f", "type": fault_type}
    if fault_type == "container-kill":
        fault["containers"] = ["server"]
    if fault_type in MINIMAL_PARAMS:
        fault["params"] = MINIMAL_PARAMS[fault_type]
    return fault


def rendered_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """Every Chaos Mesh fault type kfchaos renders, as rendered: all must be admitted."""
    out = []
    for fault_type in sorted(t for t, e in CATALOG.items() if e.kind != "Pod"):
        (manifest,) = render_experiment(experiment_with(minimal_fault(fault_type)))
        spec = copy.deepcopy(manifest["spec"])
        spec["selector"] = {k: v for k, v in spec["selector"].items() if k != "namespaces"}
        out.append((f"rendered {fault_type}", manifest["kind"], spec))
    return out


_TOKENS = {
    "size": ["512Mi", "512MiB", "1g", "1gb", "1G", "512", "5 kb", "1.5GB", "80%", "100%", "101%", "-1%", "+5%",
             "1e3MB", "0x1p4MB", "MB", "", "1KiBs", "1 GiB", "٣MB", "1_000MB", "-5MB", "1PB", "1EB"],
    "duration": ["90s", "1h30m", "1h 2m", "1d", "5", "-5m", "", "0", ".5s", "1.5h", "1µs", "9999999999h", "1s\n"],
    "value": ["1", "0", "-1", "1.0", "12.5", "+50", "100", "101", "007", "", "1e2", " 1", "٣"],
    "workers": [0, -1, 1, 64, 65, 8192, 8193],
    "rate": ["1mbps", "1.5mbps", "10 kbit", "1MBPS", "bps", "-1bps", "+1bps", "18446744073709551616bps"],
}  # fmt: skip


def fuzz_cases(seed: int = 0, count: int = 200) -> list[tuple[str, str, dict[str, Any]]]:
    """Deterministic admission fuzz corpus: odd sizes, durations, mode values, workers, rates and offsets
    combined at random (seeded), for kfchaos's verdict and a webhook to be compared on."""
    pick = random.Random(seed).choice
    out = []
    for index in range(count):
        shape = index % 5
        if shape == 0:
            stressor = {"workers": pick(_TOKENS["workers"]), "size": pick(_TOKENS["size"])}
            spec = {"stressors": {"memory": stressor}, "duration": pick(_TOKENS["duration"])}
            kind = "StressChaos"
        elif shape == 1:
            mode = pick(["fixed", "fixed-percent", "random-max-percent", "one", "all"])
            spec = {"action": "pod-failure", "mode": mode, "value": pick(_TOKENS["value"])}
            kind = "PodChaos"
        elif shape == 2:
            spec = {"timeOffset": pick(_TOKENS["duration"]), "duration": pick(_TOKENS["duration"])}
            kind = "TimeChaos"
        elif shape == 3:
            delay = {"latency": pick(_TOKENS["duration"]), "jitter": pick(_TOKENS["duration"])}
            spec = {"action": "delay", "delay": delay, "duration": pick(_TOKENS["duration"])}
            kind = "NetworkChaos"
        else:
            bandwidth = {"rate": pick(_TOKENS["rate"]), "limit": 1, "buffer": 1}
            spec = {"action": "bandwidth", "bandwidth": bandwidth}
            kind = "NetworkChaos"
        out.append((f"fuzz {seed}/{index}", *_case(kind, spec)))
    return out


def admission_agreement(cluster: Cluster, cases: list[tuple[str, str, dict[str, Any]]] | None = None) -> int:
    """Server-side dry run of every case; the answer (201 admitted, 403 webhook or 422 schema refused) must
    be kfchaos.faultspec.admission.verdict's. Returns how many cases agree (all of them, or it fails)."""
    custom = _custom(cluster)
    disagreements, agreed = [], 0
    for index, (label, kind, spec) in enumerate(cases if cases is not None else ADMISSION_CASES):
        body = chaos(cluster, kind, f"admission-{index}", {"app": "contract"}, "admission", {})
        body["spec"] = copy.deepcopy(spec)
        body["spec"]["selector"] = {"namespaces": [cluster.namespace], **spec["selector"]}
        expected = admission.verdict(body)
        try:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, cluster.namespace, PLURALS[kind], body, dry_run="All"
            )
            admitted, answer = True, "201"
        except ApiException as exc:
            if exc.status not in (403, 422):
                raise
            admitted, answer = False, f"{exc.status} {exc.body}"
        if admitted == expected.admitted:
            agreed += 1
        else:
            disagreements.append(f"{label}: the server said {answer[:300]}, kfchaos says {expected}")
    assert not disagreements, "\n".join(disagreements)
    return agreed
