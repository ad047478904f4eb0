"""The run's identity and every Kubernetes call a run makes with it: one list, read by `kfchaos doctor` (access
reviews before a run) and by tests/manifests/test_rbac.py (the list equals what the code really calls, and
manifests/ allows all of it).

KFP puts a run's service account on the whole Argo Workflow (kubeflow/pipelines
backend/src/apiserver/template/template.go), so the drivers and launchers of every task make their calls as
the same identity as kfchaos's own code. A run without one executes as KFP's `pipeline-runner`, which holds
no chaos-mesh.org permission: `kfchaos run` and `kfchaos schedule sync` always pass RUN_SERVICE_ACCOUNT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kfchaos.kfp.client import RUN_SERVICE_ACCOUNT

Scope = Literal["kfp", "target", "cluster"]  # the KFP namespace, each target namespace, cluster-wide

# The Chaos Mesh kinds the fault backend creates (tests/manifests/test_rbac.py checks this against the calls).
CHAOS_PLURALS = ("podchaos", "networkchaos", "stresschaos", "httpchaos", "iochaos", "timechaos", "dnschaos")


@dataclass(frozen=True)
class Call:
    """One Kubernetes API call, as RBAC sees it."""

    scope: Scope
    group: str
    resource: str
    verb: str
    why: str
    name: str = ""  # a resource name when the caller always names it (RBAC resourceNames)

    def describe(self) -> str:
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {what}" + (f"/{self.name}" if self.name else "")


# KFP's runtime, in the KFP namespace, as the run's identity. Upstream grants these to its `pipeline-runner`
# Role (manifests/kustomize/base/pipeline/pipeline-runner-role.yaml, whose comments name the callers):
KFP_RUNTIME_CALLS: tuple[Call, ...] = (
    # the root DAG driver reads the launcher configuration (defaultPipelineRoot, providers)
    Call("kfp", "", "configmaps", "get", "KFP driver reads the kfp-launcher ConfigMap", "kfp-launcher"),
    # drivers and launchers read the object-store credentials (backend/src/v2/objectstore/object_store.go)
    Call("kfp", "", "secrets", "get", "KFP driver/launcher read the object-store Secret", "mlpipeline-minio-artifact"),
    # Argo's executor reports each task's outputs as a WorkflowTaskResult (Argo >= 3.4)
    Call("kfp", "argoproj.io", "workflowtaskresults", "create", "Argo executor reports task results"),
    Call("kfp", "argoproj.io", "workflowtaskresults", "patch", "Argo executor reports task results"),
)

# kfchaos's fault backend (preflight, apply incl. server-side dry run, wait, remove, sweep, the GPU pod).
FAULT_CALLS: tuple[Call, ...] = (
    *(
        Call("target", "chaos-mesh.org", plural, verb, "fault backend: apply, wait, remove, sweep")
        for plural in CHAOS_PLURALS
        for verb in ("create", "get", "list", "delete")
    ),
    Call("target", "", "pods", "get", "preflight reads the target pods"),
    Call("target", "", "pods", "list", "preflight lists the target pods"),
    Call("target", "", "pods", "create", "GPU memory pressure runs its allocator pod"),
    Call("target", "", "pods", "delete", "GPU memory pressure removes its allocator pod"),
    Call("target", "", "events", "list", "why a fault did not inject, in the timeout message"),
    Call("target", "coordination.k8s.io", "leases", "get", "the target's lease: who holds the target"),
    Call("target", "coordination.k8s.io", "leases", "create", "the target's lease: the first run to use it"),
    Call("target", "coordination.k8s.io", "leases", "update", "the target's lease: acquire, renew, release"),
    Call("cluster", "apiextensions.k8s.io", "customresourcedefinitions", "get", "preflight: Chaos Mesh installed"),
)

RUN_CALLS: tuple[Call, ...] = KFP_RUNTIME_CALLS + FAULT_CALLS

# The OOM evidence bundle (kfchaos.evidence) at the end of a FAIL/INCONCLUSIVE run: reads the default Role
# already grants for the fault backend, and two opt-in ones manifests/ grants only in manifests/optional/
# (model logs can hold prompts; exec runs a command in the serving pod). Denied: the item says "RBAC denied".
EVIDENCE_CALLS: tuple[Call, ...] = (
    Call("target", "", "pods", "get", "evidence: the killed container's last terminated state"),
    Call("target", "", "pods", "list", "evidence: the target pods when no kill names one"),
    Call("target", "", "events", "list", "evidence: the pod's events"),
)
OPTIONAL_EVIDENCE_CALLS: tuple[Call, ...] = (
    Call(
        "target", "", "pods/log", "get", "evidence: the previous container log (manifests/optional/evidence-logs.yaml)"
    ),
    Call("target", "", "pods/exec", "create", "evidence: nvidia-smi in the serving pod (optional/evidence-exec.yaml)"),
)

# Preflight's Chaos Mesh placement reads (kfchaos.faults.clustercheck): cluster-wide lists of the
# controller-manager Deployment, chaos-daemon pods and DaemonSets, and the target nodes and namespaces. Best
# effort: when the run identity may not make them, preflight notes the placement as unchecked instead of
# failing. manifests/ does not grant them (they would let every run read every Deployment and Pod in the
# cluster); `kfchaos doctor` checks the same rules with the operator's credentials before a run.
PLACEMENT_CALLS: tuple[Call, ...] = (
    Call("cluster", "apps", "deployments", "list", "Chaos Mesh's namespace filter setting (controller-manager env)"),
    Call("cluster", "", "pods", "list", "chaos-daemon pods on the target pods' nodes"),
    Call("cluster", "apps", "daemonsets", "list", "chaos-daemon's tolerations, when a node has no daemon"),
    Call("cluster", "", "nodes", "get", "a daemon-less node's taints"),
    Call("cluster", "", "namespaces", "get", "the namespace filter annotation"),
)

__all__ = [
    "CHAOS_PLURALS",
    "EVIDENCE_CALLS",
    "FAULT_CALLS",
    "KFP_RUNTIME_CALLS",
    "OPTIONAL_EVIDENCE_CALLS",
    "PLACEMENT_CALLS",
    "RUN_CALLS",
    "RUN_SERVICE_ACCOUNT",
    "Call",
]
