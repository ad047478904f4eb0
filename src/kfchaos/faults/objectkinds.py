"""The two kinds of object the Chaos Mesh backend applies, and everything that differs between them.

A chaos object (chaos-mesh.org/v1alpha1: PodChaos, NetworkChaos, ... - one kind here, whatever its Kubernetes
`kind`) aims at its targets by a Chaos Mesh selector, says whom it hit in its conditions and records
(kfchaos.faults.chaosrecords), and is recovered by Chaos Mesh, whose records finalizer can hold it Terminating. The
allocator Pod kfchaos makes for gpu-memory-pressure (kfchaos.faults.gpu) aims at its target by pod affinity, is pinned
to a running target pod's node, is injected once Running and ready (the memory held) and recovered once it has ended.
The backend's lifecycle (kfchaos.faults.chaosmesh) is the same for both: it asks the object's kind here (`kind_of`,
`kind_of_plural`) wherever the answer differs, instead of branching on Pod.
"""

from __future__ import annotations

from typing import Any, Protocol

from kfchaos.faults.backend import RECORDS_FINALIZER, BackendError, FaultHandle, Manifest
from kfchaos.faults.catalog import CATALOG, GROUP, PLURALS, VERSION
from kfchaos.faults.chaosrecords import ApplyFailure, apply_failures, never_injected, parse_records, raw_records, stamp
from kfchaos.faults.gpu import pin_to_node
from kfchaos.faults.selectors import label_selector

_ONE_SHOT = {(e.kind, e.action) for e in CATALOG.values() if e.one_shot}


class ObjectKind(Protocol):
    """What the backend asks of an object's kind."""

    version: str
    # Placed on the node of a running target pod before it is created (the allocator pod: it must share the GPU).
    runs_on_a_target_node: bool
    # Chaos Mesh's records name its targets, which may since have gone or been replaced (kfchaos.faults.chaosrecords).
    has_records: bool

    def plural_group(self, manifest: Manifest) -> tuple[str, str]:
        """The REST plural and API group of the manifest's object; refused for a kind the backend does not apply."""
        ...

    def target_of(self, manifest: Manifest) -> tuple[str, str]:
        """(namespace, label selector) of the pods a manifest aims at."""
        ...

    def placed(self, manifest: Manifest, targets: list[dict[str, Any]]) -> Manifest:
        """The manifest as created, given the running target pods."""
        ...

    def ended_early(self, handle: FaultHandle, obj: dict[str, Any]) -> str | None:
        """Why the object can never be injected now (None while it still may be)."""
        ...

    def injected_targets(self, obj: dict[str, Any]) -> list[str] | None:
        """Who was hit, once injection is verified; None while it is not."""
        ...

    def injection_time(self, obj: dict[str, Any]) -> float | None:
        """When the object says the fault took effect (POSIX seconds); None when it says nothing."""
        ...

    def apply_failures(self, obj: dict[str, Any]) -> list[ApplyFailure]:
        """Targets whose injection keeps failing."""
        ...

    def is_active(self, obj: dict[str, Any]) -> bool:
        """Whether the object reports the fault active now (its targets not checked)."""
        ...

    def recovered(self, handle: FaultHandle, obj: dict[str, Any]) -> bool: ...

    def never_injected(self, obj: dict[str, Any]) -> bool:
        """Held Terminating though it never injected anything (kfchaos.faults.backend.LeftNeverInjected)."""
        ...

    def release_command(self, plural: str, obj: dict[str, Any]) -> str | None:
        """The command that lets the object go when Chaos Mesh's records finalizer holds it; None when it does not."""
        ...


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    """A chaos object's status conditions, type -> status."""
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


class ChaosObject:
    """A chaos-mesh.org object of any of the catalog's kinds."""

    version = VERSION
    runs_on_a_target_node = False
    has_records = True

    def plural_group(self, manifest: Manifest) -> tuple[str, str]:
        kind = manifest["kind"]
        if kind not in PLURALS:
            raise BackendError(f"kind {kind!r} is not one this backend applies")
        return PLURALS[kind], GROUP

    def target_of(self, manifest: Manifest) -> tuple[str, str]:
        selector = manifest["spec"]["selector"]
        namespaces = selector.get("namespaces") or [manifest["metadata"]["namespace"]]
        return namespaces[0], label_selector(selector)

    def placed(self, manifest: Manifest, targets: list[dict[str, Any]]) -> Manifest:
        return manifest  # Chaos Mesh finds the targets' nodes itself

    def ended_early(self, handle: FaultHandle, obj: dict[str, Any]) -> str | None:
        return None  # a failing Apply is retried by Chaos Mesh without end: see apply_failures

    def injected_targets(self, obj: dict[str, Any]) -> list[str] | None:
        state = conditions(obj)
        if state.get("Selected") == "True" and state.get("AllInjected") == "True":
            records = raw_records(obj)
            # No record: nothing was hit (random-max-percent may draw 0 %, pkg/selector/generic/mode.go), and
            # "all of nothing injected" is no evidence; keep waiting, so the step ends INCONCLUSIVE.
            return [str(r.get("id")) for r in records] or None
        return None

    def injection_time(self, obj: dict[str, Any]) -> float | None:
        """The earliest Apply success among its records (the records controller appends {type: Succeeded,
        operation: Apply, timestamp} per record: chaos-mesh/chaos-mesh controllers/common/records/controller.go)."""
        times = [r.injected_at for r in parse_records(obj) if r.injected_at is not None]
        return min(times) if times else None

    def apply_failures(self, obj: dict[str, Any]) -> list[ApplyFailure]:
        return apply_failures(obj)

    def is_active(self, obj: dict[str, Any]) -> bool:
        state = conditions(obj)
        phase = ((obj.get("status") or {}).get("experiment") or {}).get("desiredPhase")
        return state.get("AllInjected") == "True" and phase == "Run" and state.get("Paused") != "True"

    def recovered(self, handle: FaultHandle, obj: dict[str, Any]) -> bool:
        state = conditions(obj)
        if handle.one_shot:
            # A killed pod is not "recovered" by Chaos Mesh (its controller restarts it): the injection is the end.
            return state.get("AllInjected") == "True"
        phase = ((obj.get("status") or {}).get("experiment") or {}).get("desiredPhase")
        return state.get("AllRecovered") == "True" and state.get("Paused") != "True" and phase == "Stop"

    def never_injected(self, obj: dict[str, Any]) -> bool:
        """Held by its records finalizer though Chaos Mesh never reported any of its records injected
        (kfchaos.faults.backend.LeftNeverInjected says why it stays)."""
        records = raw_records(obj)
        return _stuck_on_records(obj) and bool(records) and all(never_injected(r) for r in records)

    def release_command(self, plural: str, obj: dict[str, Any]) -> str | None:
        """Its finalizers removed (see kfchaos.faults.backend.STUCK_REMEDY for why the cleanFinalizer annotation is
        not enough)."""
        if not _stuck_on_records(obj):
            return None
        meta = obj.get("metadata") or {}
        return (
            f"kubectl patch {plural}.{GROUP} -n {meta.get('namespace')} {meta.get('name')} --type=merge "
            """-p '{"metadata":{"finalizers":null}}'"""
        )


def _stuck_on_records(obj: dict[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and RECORDS_FINALIZER in (meta.get("finalizers") or [])


class AllocatorPod:
    """The GPU memory pressure Pod (kfchaos.faults.gpu): a core v1 Pod running kfchaos.faults.gpu_allocator."""

    version = "v1"
    runs_on_a_target_node = True
    has_records = False

    def plural_group(self, manifest: Manifest) -> tuple[str, str]:
        return "pods", ""

    def target_of(self, manifest: Manifest) -> tuple[str, str]:
        term = manifest["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        match = term["labelSelector"]
        chaos_like = {
            "labelSelectors": match.get("matchLabels") or {},
            "expressionSelectors": match.get("matchExpressions") or [],
        }
        return term["namespaces"][0], label_selector(chaos_like)

    def placed(self, manifest: Manifest, targets: list[dict[str, Any]]) -> Manifest:
        """Pinned to the first running target pod's node."""
        if not targets:
            return manifest
        node = (targets[0].get("spec") or {}).get("nodeName")
        return pin_to_node(manifest, node) if node else manifest

    def ended_early(self, handle: FaultHandle, obj: dict[str, Any]) -> str | None:
        """Ended before it was ready: rejected by the kubelet (nodeName bypasses the scheduler, so no free
        nvidia.com/gpu reads as phase Failed, reason OutOfnvidia.com/gpu: kubernetes pkg/kubelet/lifecycle/
        predicate.go), or the allocator held less than asked (exit 4). Waiting longer cannot make it injected."""
        status = obj.get("status") or {}
        if status.get("phase") not in ("Failed", "Succeeded"):
            return None
        terminated = [(s.get("state") or {}).get("terminated") or {} for s in status.get("containerStatuses") or []]
        detail = "; ".join(
            f"exit {t.get('exitCode')} {t.get('reason') or ''} {t.get('message') or ''}".strip()
            for t in terminated
            if t
        )
        return (
            f"{handle.kind} {handle.namespace}/{handle.name} ended ({status.get('phase')}"
            f"{', ' + status['reason'] if status.get('reason') else ''}"
            f"{': ' + status['message'] if status.get('message') else ''}"
            f"{'; ' + detail if detail else ''}) before holding the asked memory; not injected"
        )

    def injected_targets(self, obj: dict[str, Any]) -> list[str] | None:
        """Its node, once Running and ready (the memory held)."""
        status = obj.get("status") or {}
        statuses = status.get("containerStatuses") or []
        if status.get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses):
            return [f"node/{(obj.get('spec') or {}).get('nodeName')}"]
        return None

    def injection_time(self, obj: dict[str, Any]) -> float | None:
        """Its Ready condition's lastTransitionTime (it turns Ready once the memory is held)."""
        ready = [
            c.get("lastTransitionTime")
            for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        ]
        return stamp(ready[0]) if ready else None

    def apply_failures(self, obj: dict[str, Any]) -> list[ApplyFailure]:
        return []  # a pod that cannot hold the memory ends: see ended_early

    def is_active(self, obj: dict[str, Any]) -> bool:
        return self.injected_targets(obj) is not None

    def recovered(self, handle: FaultHandle, obj: dict[str, Any]) -> bool:
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    def never_injected(self, obj: dict[str, Any]) -> bool:
        return False  # no finalizer holds it

    def release_command(self, plural: str, obj: dict[str, Any]) -> str | None:
        return None


CHAOS_OBJECT = ChaosObject()
ALLOCATOR_POD = AllocatorPod()
# Every plural a run's objects can have, in the order a sweep deletes them.
SWEPT_PLURALS = [*PLURALS.values(), "pods"]


def kind_of(manifest: Manifest) -> ObjectKind:
    """The kind of a manifest's object. Anything but a Pod is read as a chaos object: the exec document
    (kfchaos.faults.gpu.EXEC_KIND) aims at its targets by a Chaos Mesh selector too, and is never applied
    (`plural_group` refuses it)."""
    return ALLOCATOR_POD if manifest["kind"] == "Pod" else CHAOS_OBJECT


def kind_of_plural(plural: str) -> ObjectKind:
    """The kind of an object listed or handled under `plural`."""
    return ALLOCATOR_POD if plural == "pods" else CHAOS_OBJECT


def fault_handle(manifest: Manifest, uid: str) -> FaultHandle:
    """The handle of the manifest's object (uid "" before it is known)."""
    kind = kind_of(manifest)
    plural, group = kind.plural_group(manifest)
    spec = manifest.get("spec") or {}
    return FaultHandle(
        kind=manifest["kind"],
        plural=plural,
        group=group,
        version=kind.version,
        namespace=manifest["metadata"]["namespace"],
        name=manifest["metadata"]["name"],
        uid=uid,
        one_shot=(manifest["kind"], spec.get("action")) in _ONE_SHOT,
    )


def injection_time(handle: FaultHandle, obj: dict[str, Any]) -> float | None:
    """When the object says the fault took effect: a chaos object's earliest Apply success among its records, an
    allocator pod's Ready transition. None when neither is there."""
    return kind_of_plural(handle.plural).injection_time(obj)
