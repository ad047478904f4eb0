"""Chaos Mesh's records of whom a fault hit, and whether those targets are still the live pods.

Read from chaos-mesh/chaos-mesh (v2.8 line, master):

- A record is `{id, selectorKey, phase, injectedCount, recoveredCount, events}` (api/v1alpha1/common_types.go
  Record, RecordEvent). It carries no pod UID. Each successful Apply appends an event
  `{type: Succeeded, operation: Apply, timestamp}`; at most `MaxEvents` are kept, oldest dropped.
- The id is `namespace/pod` for kinds that select pods (PodChaos pod-kill and pod-failure, NetworkChaos,
  HTTPChaos: pkg/selector/pod) and `namespace/pod/container` for kinds that select containers (StressChaos,
  IOChaos, TimeChaos, DNSChaos, PodChaos container-kill: pkg/selector/container/selector.go Container.Id).
  Without `containerNames` the container is `pod.Spec.Containers[0]`: a sidecar listed first is the target.
- Targets are selected once, while the object has no records (controllers/common/records/controller.go,
  `if records == nil`, "TODO: dynamic upgrade the records when some of these pods/containers stopped"). A
  record stays "Injected" and AllInjected stays True after its pod was deleted, evicted or replaced by a
  rollout; a pod that appears later (even with the same name, as a StatefulSet's does) is never injected.

So AllInjected alone overstates a fault: kfchaos also checks that every recorded pod is still the pod that
was injected. Without a UID in the record, "the same pod" is: a pod of that name exists, is not being
deleted, has not ended, and was created no later than the record's injection (its first Apply event; the
chaos object's creation when no event is left). Timestamps have one-second resolution, so a same-name
replacement created within the second of the injection is not told apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kfchaos.faults.backend import BackendError

# Kinds whose GetSelectorSpecs returns a ContainerSelector (api/v1alpha1/*_types.go).
CONTAINER_KINDS = frozenset({"StressChaos", "IOChaos", "TimeChaos", "DNSChaos"})
# The most records kfchaos checks in one fault: each record's pod is read (one GET) at every poll of a stage, a few
# times a second, so a fault over more targets cannot be watched; it is refused as unverifiable (never verified, so
# never a PASS). A fault on an LLM server hits a few pods; the API server's object size bounds a real status to a few
# thousand records at most (kfchaos.faults.kubeclient.MAX_OBJECT_BYTES).
MAX_RECORDS = 256


def selects_containers(kind: str, action: str | None) -> bool:
    """Whether Chaos Mesh records (and injects into) one container per pod for this kind and action."""
    return kind in CONTAINER_KINDS or (kind == "PodChaos" and action == "container-kill")


@dataclass(frozen=True)
class Record:
    namespace: str
    pod: str
    container: str | None  # None for pod kinds
    phase: str
    injected_at: float | None  # the first Apply success still listed (POSIX seconds)

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.pod}" + (f"/{self.container}" if self.container else "")


def stamp(value: Any) -> float | None:
    """POSIX seconds of a Kubernetes timestamp (RFC 3339 text, or a datetime as the client decodes it)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def raw_records(obj: dict[str, Any]) -> list[Any]:
    """`status.experiment.containerRecords` of a chaos object as the API returned it ([] when absent)."""
    listed = ((obj.get("status") or {}).get("experiment") or {}).get("containerRecords") or []
    return listed if isinstance(listed, list) else []


def never_injected(raw: dict[str, Any]) -> bool:
    """A record Chaos Mesh never reported injected: its phase is "Not Injected" or "Not Injected/..." and its
    injectedCount, which the records controller raises on each successful Apply
    (controllers/common/records/controller.go), is 0."""
    return str(raw.get("phase") or "").startswith("Not Injected") and not int(raw.get("injectedCount") or 0)


def parse_records(obj: dict[str, Any]) -> list[Record]:
    """The records of a chaos object as Chaos Mesh wrote them. An id that is not `ns/pod` (pod kinds) or
    `ns/pod/container` (container kinds) is refused: kfchaos cannot tell what it hit."""
    kind = str(obj.get("kind", ""))
    action = (obj.get("spec") or {}).get("action")
    containers = selects_containers(kind, action)
    name = f"{kind} {(obj.get('metadata') or {}).get('namespace')}/{(obj.get('metadata') or {}).get('name')}"
    out: list[Record] = []
    listed = raw_records(obj)
    if len(listed) > MAX_RECORDS:
        raise BackendError(
            f"{name}: its status lists {len(listed)} records, more than the {MAX_RECORDS} kfchaos checks one by one; "
            "the fault cannot be shown to hit live, intended targets"
        )
    for raw in listed:
        ident = str((raw or {}).get("id", ""))
        parts = ident.split("/")
        if len(parts) != (3 if containers else 2) or not all(parts):
            shape = "namespace/pod/container" if containers else "namespace/pod"
            raise BackendError(f"{name}: record id {ident!r} is not {shape}; cannot tell which target it hit")
        applied = [
            stamp(e.get("timestamp"))
            for e in raw.get("events") or []
            if isinstance(e, dict) and e.get("type") == "Succeeded" and e.get("operation") == "Apply"
        ]
        times = [t for t in applied if t is not None]
        out.append(
            Record(
                namespace=parts[0],
                pod=parts[1],
                container=parts[2] if containers else None,
                phase=str(raw.get("phase", "")),
                injected_at=min(times) if times else None,
            )
        )
    return out


def stale_reason(record: Record, pod: dict[str, Any] | None, created_at: float | None) -> str | None:
    """Why the recorded target is no longer what Chaos Mesh injected (None while it still is). `pod` is the
    pod of that name now (None: not found); `created_at` the chaos object's creation, used when the record
    lists no Apply event."""
    if pod is None:
        return f"recorded target {record.target} is gone (deleted, evicted or replaced); Chaos Mesh never re-selects"
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return f"recorded target {record.target} is being deleted"
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Failed", "Succeeded"):
        return f"recorded target {record.target} has ended (phase {phase})"
    injected = record.injected_at if record.injected_at is not None else created_at
    born = stamp(meta.get("creationTimestamp"))
    if injected is None or born is None:
        return f"recorded target {record.target}: no injection or creation time to tell it is the injected pod"
    if born > injected:
        return (
            f"recorded target {record.target} is a new pod of the same name (created {meta.get('creationTimestamp')}, "
            "after the injection); Chaos Mesh never injects pods that appear later"
        )
    if record.container is not None:
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if record.container not in names:
            return f"recorded target {record.target}: the pod has no container {record.container!r} now"
    return None


def wrong_container(record: Record, pod: dict[str, Any] | None, wanted: list[str]) -> str | None:
    """Why a container kind's record did not hit the intended container (None when it did). With
    containerNames the record must name one of them; without, Chaos Mesh took Containers[0], which is only
    the intended one when the pod has a single container."""
    if record.container is None:
        return None
    if wanted:
        if record.container in wanted:
            return None
        return f"record {record.target} names container {record.container!r}, not one of {wanted}"
    names = [c.get("name") for c in ((pod or {}).get("spec") or {}).get("containers") or []]
    if len(names) <= 1:
        return None
    return (
        f"record {record.target}: without containerNames Chaos Mesh injected the pod's first container "
        f"{record.container!r} of {names}, which may be a sidecar; name the container in the fault's `containers`"
    )


@dataclass(frozen=True)
class ApplyFailure:
    """A record whose Apply keeps failing: how many times in a row (its newest events), and the last error."""

    target: str
    attempts: int
    message: str


def apply_failures(obj: dict[str, Any]) -> list[ApplyFailure]:
    """Records not Injected whose newest events are failed Apply attempts, newest error kept.

    When Apply fails, Chaos Mesh's records controller (chaos-mesh/chaos-mesh controllers/common/records/
    controller.go, `if err != nil` after `r.Impl.Apply`) appends `{type: Failed, operation: Apply, message:
    err.Error()}` to the record's events, records a Kubernetes Event (Warning, reason Failed, "Failed to apply
    chaos: <err>": controllers/utils/recorder/error.go), leaves the phase "Not Injected" or "Not Injected/Wait",
    and requeues: it retries without end, so the conditions never say it failed (AllInjected stays False).
    Only failures after the record's last Succeeded event count: an older failure was retried successfully."""
    out: list[ApplyFailure] = []
    for raw in raw_records(obj):
        if not isinstance(raw, dict) or raw.get("phase") == "Injected":
            continue
        attempts, message = 0, ""
        for event in reversed([e for e in raw.get("events") or [] if isinstance(e, dict)]):
            if event.get("type") != "Failed" or event.get("operation") != "Apply":
                break
            attempts += 1
            message = message or str(event.get("message") or "")
        if attempts:
            out.append(ApplyFailure(str(raw.get("id", "")), attempts, message))
    return out
