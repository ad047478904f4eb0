"""kfchaos.faults.records: Chaos Mesh's record ids parsed by kind, and a recorded target told apart from a pod
that replaced it (records carry no UID: name, deletion, phase and creation time against the Apply event)."""

from __future__ import annotations

from typing import Any

import pytest

from kfchaos.faults.backend import BackendError
from kfchaos.faults.records import parse_records, stale_reason, wrong_container

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
