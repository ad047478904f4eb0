"""kfchaos.faults.chaosrecords: Chaos Mesh's record ids parsed by kind, and a recorded target told apart from a pod
that replaced it (records carry no UID: name, deletion, phase and creation time against the Apply event)."""

from __future__ import annotations

from typing import Any

import pytest

from kfchaos.faults.backend import BackendError, FaultHandle
from kfchaos.faults.chaosrecords import parse_records, stale_reason, stamp, wrong_container
from kfchaos.faults.objectkinds import injection_time

APPLIED = "2026-01-01T10:00:05Z"


def _obj(kind: str, ids: list[str], action: str | None = None, events: bool = True) -> dict[str, Any]:
    event = [{"type": "Succeeded", "operation": "Apply", "timestamp": APPLIED}] if events else []
    records = [{"id": i, "selectorKey": ".", "phase": "Injected", "events": event} for i in ids]
    spec = {"action": action} if action else {}
    meta = {"name": "x", "namespace": "ns", "creationTimestamp": "2026-01-01T10:00:00Z"}
    return {"kind": kind, "metadata": meta, "spec": spec, "status": {"experiment": {"containerRecords": records}}}


def _pod(created: str, containers: tuple[str, ...] = ("vllm",), **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "creationTimestamp": created, **meta},
        "spec": {"containers": [{"name": c} for c in containers]},
        "status": {"phase": "Running"},
    }


def test_ids_by_kind() -> None:
    (pod,) = parse_records(_obj("PodChaos", ["ns/p"], "pod-failure"))
    assert (pod.namespace, pod.pod, pod.container, pod.target) == ("ns", "p", None, "ns/p")
    (stress,) = parse_records(_obj("StressChaos", ["ns/p/sidecar"]))
    assert stress.container == "sidecar" and stress.injected_at is not None
    (kill,) = parse_records(_obj("PodChaos", ["ns/p/vllm"], "container-kill"))
    assert kill.container == "vllm"


@pytest.mark.parametrize("kind,ident", [("StressChaos", "ns/p"), ("PodChaos", "ns/p/c"), ("IOChaos", "ns//c")])
def test_malformed_ids_are_refused(kind: str, ident: str) -> None:
    with pytest.raises(BackendError, match="record id"):
        parse_records(_obj(kind, [ident], "pod-failure" if kind == "PodChaos" else None))


def test_stale_reasons() -> None:
    (record,) = parse_records(_obj("PodChaos", ["ns/p"], "pod-failure"))
    assert stale_reason(record, _pod("2026-01-01T09:00:00Z"), None) is None
    assert stale_reason(record, _pod(APPLIED), None) is None  # same second: not told apart
    assert "gone" in (stale_reason(record, None, None) or "")
    assert "same name" in (stale_reason(record, _pod("2026-01-01T10:00:06Z"), None) or "")
    deleting = _pod("2026-01-01T09:00:00Z", deletionTimestamp="2026-01-01T10:01:00Z")
    assert "being deleted" in (stale_reason(record, deleting, None) or "")
    ended = _pod("2026-01-01T09:00:00Z")
    ended["status"]["phase"] = "Failed"
    assert "ended" in (stale_reason(record, ended, None) or "")


def test_without_apply_events_the_objects_creation_bounds_the_injection() -> None:
    (record,) = parse_records(_obj("PodChaos", ["ns/p"], "pod-failure", events=False))
    created = parse_records(_obj("PodChaos", ["ns/p"], "pod-failure"))[0].injected_at
    assert created is not None
    assert stale_reason(record, _pod("2026-01-01T10:00:01Z"), created - 5) is not None
    assert stale_reason(record, _pod("2026-01-01T09:59:00Z"), created - 5) is None


def test_wrong_container() -> None:
    (record,) = parse_records(_obj("StressChaos", ["ns/p/sidecar"]))
    assert wrong_container(record, _pod(APPLIED, ("sidecar",)), []) is None
    assert "sidecar" in (wrong_container(record, _pod(APPLIED, ("sidecar", "vllm")), []) or "")
    assert "not one of" in (wrong_container(record, None, ["vllm"]) or "")


def test_a_stage_whose_target_pod_was_replaced_is_not_covered(server: Any, backend: Any) -> None:
    """Chaos Mesh keeps AllInjected True on the record of a pod a rollout replaced; the stage's fault watcher
    (activity.Poller on backend.is_active) must see the fault inactive from then on, so the stage is not
    counted as under fault."""
    from kfchaos.faults.activity import FaultActivity, Poller, coverage
    from tests.faults.conftest import manifests

    fault = {"name": "fail", "type": "pod-failure", "mode": "fixed", "value": "1"}
    handle = backend.apply(manifests("run-r", fault)[0])
    (target,) = backend.wait_injected(handle).targets
    clock = iter([100.0, 110.0, 120.0, 130.0])
    activity = FaultActivity("fail", handle.name, handle.kind, [50], applied_at=99.0)
    poller = Poller([activity], lambda _: backend.is_active(handle), interval=1.0, clock=lambda: next(clock))
    poller.poll_once()  # 100: hits its pod
    assert activity.observations[-1][1], activity.errors
    namespace, pod = target.split("/")
    server.remove_pod(namespace, pod)
    server.add_pod(namespace, pod + "-new", {"app.kubernetes.io/name": "vllm"}, containers=["vllm"])
    poller.poll_once()  # 110: the record names a pod that is gone
    poller.poll_once()  # 120
    poller.poll_once()  # 130
    assert [active for _, active in activity.observations] == [True, False, False, False]
    assert "gone" in activity.errors[-1]
    assert not coverage(activity, (100.0, 130.0)).ok


def test_the_injection_time_is_the_earliest_apply_success_of_any_record() -> None:
    obj = _obj("PodChaos", ["ns/p", "ns/q"], "pod-failure")
    records = obj["status"]["experiment"]["containerRecords"]
    records[1]["events"] = [
        {"type": "Failed", "operation": "Apply", "timestamp": "2026-01-01T10:00:01Z"},  # a failure is no injection
        {"type": "Succeeded", "operation": "Apply", "timestamp": "2026-01-01T10:00:09Z"},
    ]
    handle = FaultHandle("PodChaos", "podchaos", "chaos-mesh.org", "v1alpha1", "ns", "x", "u")
    assert injection_time(handle, obj) == stamp(APPLIED)
    for record in records:
        record["events"] = []
    assert injection_time(handle, obj) is None  # no Apply event: unknown, not the poll's time


def test_an_allocator_pods_injection_time_is_its_ready_transition() -> None:
    handle = FaultHandle("Pod", "pods", "", "v1", "ns", "gpu-hog", "u")
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T10:00:07Z"}
    assert injection_time(handle, {"status": {"conditions": [ready]}}) == stamp("2026-01-01T10:00:07Z")
    assert injection_time(handle, {"status": {"conditions": [{**ready, "status": "False"}]}}) is None
