"""The interface every fault backend offers, and what it hands back: handles, reports, audit events, errors.

The pipeline's steps talk only to `FaultBackend`: the Chaos Mesh backend (kfchaos.faults.chaosmesh) for
a cluster, a local one for the embedded mode. Backends take rendered manifests (kfchaos.faults.render),
so what is applied is exactly what `kfchaos render` shows and what the audit record stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kfchaos.errors import KfchaosError

if TYPE_CHECKING:
    from kfchaos.spec import FaultBase

Manifest = dict[str, Any]


class BackendError(KfchaosError):
    """The cluster refused or failed an action; the message says what to do."""


class ChaosMeshNotInstalled(BackendError):
    pass


class PermissionDenied(BackendError):
    """A 403, explained as the RBAC rule the service account lacks."""

    def __init__(self, verb: str, resource: str, group: str, namespace: str | None, detail: str) -> None:
        self.verb, self.resource, self.group, self.namespace = verb, resource, group, namespace
        scope = f"in namespace {namespace!r} (a Role there)" if namespace else "cluster-wide (a ClusterRole)"
        super().__init__(
            f"permission denied: the service account may not {verb} {resource} "
            f"(API group {group or 'core'!r}) {scope}. Add the rule "
            f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}; '
            f"see docs/faults.md, RBAC. Server said: {detail}"
        )


class AdmissionDenied(BackendError):
    """Chaos Mesh's admission webhook refused the object (HTTP 403 like RBAC, told apart by its message
    "admission webhook ... denied the request", k8s.io/apiserver pkg/admission/plugin/webhook/errors/
    statuserror.go): the experiment (or, for vauth.kb.io, the identity's rights in an affected namespace)
    needs fixing, not the RBAC rule for the verb."""

    def __init__(self, verb: str, resource: str, namespace: str | None, name: str | None, detail: str) -> None:
        self.detail = detail
        super().__init__(
            f"Chaos Mesh refused to {verb} {resource} {namespace or ''}/{name or ''}: {detail}. This is its "
            "admission webhook, not RBAC: fix the fault's parameters (kfchaos validate checks the known rules), "
            "or for vauth.kb.io give the run identity create on this kind in every namespace the fault selects"
        )


class NamespaceGone(BackendError):
    """The namespace is being deleted (or is gone): the NamespaceLifecycle admission plugin answers creates
    there with 403 "unable to create new content in namespace X because it is being terminated", then 404
    namespaces "X" not found (kubernetes plugin/pkg/admission/namespace/lifecycle/admission.go). Not RBAC."""


class InjectionTimeout(BackendError):
    """The fault was not verified injected in time: the run cannot claim the fault was active (INCONCLUSIVE)."""


class InjectionFailed(InjectionTimeout):
    """Chaos Mesh tried to inject and its Apply failed, again and again (no chaos-daemon on the node, the
    container not found): waiting longer will not make the fault active. Reported as soon as it shows."""


class TargetsGone(BackendError):
    """The fault's records name pods that are gone or replaced (Chaos Mesh never re-selects): it hits nothing
    there, so it is not verified active (kfchaos.faults.chaosrecords)."""


class RecoveryTimeout(BackendError):
    pass


# Chaos Mesh drops its `chaos-mesh/records` finalizer when every record is "Not Injected", or when this
# annotation is `forced` (chaos-mesh/chaos-mesh controllers/common/finalizers/controller.go,
# AnnotationCleanFinalizer / AnnotationCleanFinalizerForced). The annotation is read by the last step of the
# controller's pipeline (controllers/common/step.go: records, then finalizers' clean step), and the pipeline
# returns as soon as a step asks to requeue (controllers/common/pipeline/pipeline.go), which the records step
# does while a Recover fails (controllers/common/records/controller.go, needRetry). So while recovery keeps
# failing, the case that leaves an object Terminating, `forced` is never read: the real controller showed it
# (tests/contract/scenarios.py finalizer_stuck_then_released, run by tests/cluster/test_contract_real.py).
# What releases the object then is removing the finalizer itself.
CLEAN_FINALIZER_ANNOTATION = "chaos-mesh.chaos-mesh.org/cleanFinalizer"
RECORDS_FINALIZER = "chaos-mesh/records"
STUCK_REMEDY = (
    "Chaos Mesh removes its chaos-mesh/records finalizer only once every record is recovered, and does not read "
    f"its {CLEAN_FINALIZER_ANNOTATION}=forced annotation while a recovery keeps failing. If the fault cannot be "
    "undone (the target's node or chaos-daemon is gone), undo it on the target by hand, then remove the "
    "finalizer"
)


class StuckTerminating(BackendError):
    """Objects still present when a sweep's deadline passed: most often Terminating because Chaos Mesh cannot
    recover a record (its chaos-daemon or node gone), so its finalizer stays."""

    def __init__(self, timeout: float, objects: list[str], commands: list[str]) -> None:
        self.objects, self.commands = objects, commands
        remedy = f" {STUCK_REMEDY}: " + "; ".join(commands) if commands else ""
        super().__init__(f"still present after {timeout:g}s: {'; '.join(objects)}.{remedy}")


class LeftNeverInjected(StuckTerminating):
    """Objects still Terminating whose every record Chaos Mesh never reported injected (phase "Not Injected" or
    "Not Injected/...", injectedCount 0). Stopped, such a record is applied again rather than recovered
    (chaos-mesh/chaos-mesh controllers/common/records/controller.go: desiredPhase Stop on a "Not Injected/*"
    record is an Apply), so while the cause of its failed Apply lasts (a kernel without sch_netem, no
    chaos-daemon on the node) the Apply keeps failing, the records step requeues, and the finalizer never goes.
    By Chaos Mesh's own account the target holds nothing it applied: the run can still be judged (never PASS)."""

    def __init__(self, timeout: float, objects: list[str], commands: list[str]) -> None:
        super().__init__(timeout, objects, commands)
        self.reason = (
            f"left Terminating, never injected: {'; '.join(objects)}. Chaos Mesh retries the failed Apply of a "
            "never-injected record instead of recovering it, so it cannot release these while the cause of the "
            "failure lasts; once it is gone or understood, release each: " + "; ".join(commands)
        )


@dataclass(frozen=True)
class FaultHandle:
    """What identifies an applied fault object: enough to wait for, remove and audit it."""

    kind: str
    plural: str
    group: str  # "" for core (Pods)
    version: str
    namespace: str
    name: str
    uid: str
    one_shot: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class InjectionReport:
    handle: FaultHandle
    targets: list[str]  # containerRecords ids (namespace/pod[/container]) or the allocator pod's node
    elapsed: float
    # When the fault took effect by the cluster's own clock (POSIX seconds): the earliest Apply success among the
    # records (kfchaos.faults.chaosrecords), or the allocator pod's Ready transition. None when the object says nothing.
    injected_at: float | None = None


@dataclass(frozen=True)
class TargetSweep:
    """A takeover's sweep of the dead holder's objects (`sweep_at_target`): how many were deleted, and those left
    because they cannot reach the target the lease guards ("plural namespace/name")."""

    deleted: int
    kept: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PreflightReport:
    crds: list[str] = field(default_factory=list)
    matching_pods: dict[str, int] = field(default_factory=dict)  # object name -> running target pods
    dry_run: list[str] = field(default_factory=list)  # object names the server accepted in a dry run
    unchecked: list[str] = field(default_factory=list)  # placement checks the identity could not read


@dataclass(frozen=True)
class ApiEvent:
    """One API call as the audit record keeps it."""

    time: str  # RFC 3339, UTC
    verb: str
    kind: str
    namespace: str | None
    name: str | None
    code: int  # HTTP status; 0 when no response came (connection error)
    uid: str | None = None
    resource_version: str | None = None
    attempt: int = 1
    dry_run: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FaultBackend(Protocol):
    """Items are rendered manifests, or experiment faults when the backend is bound to an experiment run."""

    events: list[ApiEvent]

    def preflight(self, items: Sequence[Manifest | FaultBase]) -> PreflightReport: ...

    def apply(self, item: Manifest | FaultBase) -> FaultHandle: ...

    def wait_injected(self, handle: FaultHandle, timeout: float | None = None) -> InjectionReport: ...

    def remove(self, handle: FaultHandle) -> None: ...

    def wait_recovered(self, handle: FaultHandle, timeout: float | None = None) -> None: ...

    def sweep(
        self, run_id: str | None, namespaces: list[str] | None = None, older_than: float | None = None
    ) -> int: ...
