"""Where Chaos Mesh can inject: chaos-daemon on the target pods' nodes, and the namespace filter.

Pure rules over a `kubernetes.client.ApiClient` (reads only), shared by the backend's preflight and by
`kfchaos doctor` (one place for each rule). Each check returns the problems it found, as sentences that
name the fix; an empty list means the rule holds.

Upstream behaviour relied on (chaos-mesh/chaos-mesh v2.7):
- Every daemon-based fault reaches the target through the chaos-daemon pod *on the target's node*: the
  controller looks up the chaos-daemon endpoint on `pod.spec.nodeName` and fails with "cannot find daemonIP
  on node X" when there is none (controllers/utils/chaosdaemon/chaosdaemon.go, FindDaemonIP).
- chaos-daemon is a DaemonSet labelled app.kubernetes.io/component=chaos-daemon whose tolerations come
  from the chart's `chaosDaemon.tolerations`, empty by default (helm/chaos-mesh/values.yaml,
  templates/chaos-daemon-daemonset.yaml); so nodes tainted e.g. `nvidia.com/gpu:NoSchedule` (GPU node
  pools on GKE/AKS/EKS) get no chaos-daemon.
- With `controllerManager.enableFilterNamespace` (env ENABLE_FILTER_NAMESPACE on the controller-manager
  Deployment, labelled app.kubernetes.io/component=controller-manager), only pods in namespaces annotated
  `chaos-mesh.org/inject=enabled` are selected (pkg/config/controller.go EnableFilterNamespace).
- Which faults need the daemon: pod-kill deletes through the API and pod-failure patches the pod's image,
  every other kind (network, stress, io, http, time, dns, container-kill) runs in the target's namespaces
  through chaos-daemon (controllers/chaosimpl/*; podchaos/containerkill uses the daemon's ContainerKill).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import kubernetes.client

DAEMON_SELECTOR = "app.kubernetes.io/component=chaos-daemon"
CONTROLLER_SELECTOR = "app.kubernetes.io/component=controller-manager"
FILTER_ENV = "ENABLE_FILTER_NAMESPACE"
FILTER_ANNOTATION = "chaos-mesh.org/inject"
# (connect, read) seconds: the kubernetes client drops a lone float timeout (kubernetes/client/rest.py takes an
# int or a pair), which left these reads without any.
TIMEOUT = (15.0, 15.0)
# (kind, action) pairs that do not go through chaos-daemon; every other chaos kind does.
NO_DAEMON = {("PodChaos", "pod-kill"), ("PodChaos", "pod-failure")}
# Taints the DaemonSet controller tolerates by itself (kubernetes pkg/controller/daemon/util/daemonset_util.go
# AddOrUpdateDaemonPodTolerations): node.kubernetes.io/{not-ready,unreachable,disk-pressure,memory-pressure,
# pid-pressure,unschedulable,network-unavailable}.
_DEFAULT_TOLERATED = {
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/network-unavailable",
}


def needs_daemon(manifest: dict[str, Any]) -> bool:
    """Whether a rendered object is injected through chaos-daemon (a GPU allocator Pod is not a chaos kind)."""
    kind = manifest.get("kind")
    if kind in (None, "Pod") or not str(kind).endswith("Chaos"):
        return False
    return (kind, (manifest.get("spec") or {}).get("action")) not in NO_DAEMON


def tolerates(tolerations: Iterable[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Kubernetes toleration matching (k8s.io/api core/v1 toleration.go ToleratesTaint): the effect matches
    (or the toleration's is empty), and the key matches with Exists, or key and value with Equal; an empty
    key with Exists tolerates everything."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _plain(api_client: kubernetes.client.ApiClient, obj: Any) -> dict[str, Any]:
    return obj if isinstance(obj, dict) else dict(api_client.sanitize_for_serialization(obj))


def _raw(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The JSON of a read or list, untyped: the typed models refuse objects with fields a real cluster
    always fills (and we only read a few keys)."""
    response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
    body = json.loads(response.data or b"{}")
    return body if isinstance(body, dict) else {}


def daemon_gaps(api_client: kubernetes.client.ApiClient, nodes: Iterable[str | None]) -> list[str]:
    """Nodes among `nodes` with no Running chaos-daemon pod, each with the reason when the DaemonSet's
    tolerations explain it (a taint they do not tolerate)."""
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    wanted = sorted({n for n in nodes if n})
    if not wanted:
        return []
    pods = _raw(core.list_pod_for_all_namespaces, label_selector=DAEMON_SELECTOR).get("items") or []
    covered = {(p.get("spec") or {}).get("nodeName") for p in pods if (p.get("status") or {}).get("phase") == "Running"}
    missing = [n for n in wanted if n not in covered]
    if not missing:
        return []
    daemonsets = _raw(apps.list_daemon_set_for_all_namespaces, label_selector=DAEMON_SELECTOR).get("items") or []
    if not daemonsets:
        return [
            f"no chaos-daemon DaemonSet ({DAEMON_SELECTOR}) in the cluster: nodes {', '.join(missing)} cannot be "
            "injected (Chaos Mesh: 'cannot find daemonIP on node'); install Chaos Mesh with its chaos-daemon"
        ]
    tolerations = [
        t
        for d in daemonsets
        for t in ((((d.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or [])
    ]
    problems = []
    for node_name in missing:
        why = ""
        try:
            node = _raw(core.read_node, node_name)
        except kubernetes.client.exceptions.ApiException:
            node = {}
        blocking = [
            t
            for t in ((node.get("spec") or {}).get("taints") or [])
            if t.get("effect") in ("NoSchedule", "NoExecute")
            and t.get("key") not in _DEFAULT_TOLERATED
            and not tolerates(tolerations, t)
        ]
        if blocking:
            shown = ", ".join(f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
                              for t in blocking)  # fmt: skip
            why = (
                f" because of taint {shown}, which chaos-daemon does not tolerate; add it to the Helm value "
                "chaosDaemon.tolerations (e.g. {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule})"
            )
        problems.append(
            f"no running chaos-daemon on node {node_name}{why}; every daemon-based fault on its pods fails with "
            f"'cannot find daemonIP on node {node_name}'"
        )
    return problems


def namespace_filter_gaps(api_client: kubernetes.client.ApiClient, namespaces: Iterable[str]) -> list[str]:
    """Namespaces among `namespaces` Chaos Mesh will not select because its namespace filter is on and they
    lack the `chaos-mesh.org/inject=enabled` annotation. No controller-manager readable: no finding here
    (doctor reports the installation separately)."""
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    deployments = _raw(apps.list_deployment_for_all_namespaces, label_selector=CONTROLLER_SELECTOR).get("items")
    enabled = False
    for deployment in deployments or []:
        containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
        for container in containers or []:
            for env in container.get("env") or []:
                if env.get("name") == FILTER_ENV and str(env.get("value", "")).strip().lower() == "true":
                    enabled = True
    if not enabled:
        return []
    problems = []
    for name in sorted(set(namespaces)):
        try:
            namespace = _raw(core.read_namespace, name)
        except kubernetes.client.exceptions.ApiException as exc:
            problems.append(f"namespace {name}: cannot read it to check the {FILTER_ANNOTATION} annotation "
                            f"({exc.status} {exc.reason})")  # fmt: skip
            continue
        annotations = (namespace.get("metadata") or {}).get("annotations") or {}
        if annotations.get(FILTER_ANNOTATION) != "enabled":
            problems.append(
                f"Chaos Mesh's namespace filter is on (ENABLE_FILTER_NAMESPACE) and namespace {name} lacks the "
                f"annotation {FILTER_ANNOTATION}=enabled: no pod there is selected; "
                f"kubectl annotate namespace {name} {FILTER_ANNOTATION}=enabled"
            )
    return problems


def doctor_checks(
    api_client: kubernetes.client.ApiClient, experiment: Any, pods: list[Any]
) -> Iterator[tuple[str, bool, str, str]]:
    """(check, passed, detail, fix) rows for `kfchaos doctor`: chaos-daemon on the target pods' nodes (when
    a fault of the experiment needs it) and the namespace filter over every namespace the faults select in."""
    from kfchaos.faults.render import render_fault

    manifests = [render_fault(experiment, f, "doctor") for f in experiment.spec.faults if _renders(f)]
    if any(needs_daemon(m) for m in manifests):
        nodes = [(_plain(api_client, p).get("spec") or {}).get("nodeName") or "" for p in pods]
        gaps = daemon_gaps(api_client, nodes)
        yield (
            "chaos-daemon on target nodes",
            not gaps,
            "; ".join(gaps) or f"chaos-daemon runs on {', '.join(sorted({n for n in nodes if n})) or 'no node'}",
            "set chaosDaemon.tolerations in the Chaos Mesh Helm values to tolerate the nodes' taints" if gaps else "",
        )
    else:
        yield ("chaos-daemon on target nodes", True, "no fault of this experiment needs chaos-daemon", "")
    gaps = namespace_filter_gaps(api_client, selected_namespaces(manifests))
    yield (
        "namespace filter annotation",
        not gaps,
        "; ".join(gaps) or "Chaos Mesh's namespace filter is off, or every namespace is annotated",
        f"kubectl annotate namespace NAME {FILTER_ANNOTATION}=enabled" if gaps else "",
    )


def selected_namespaces(manifests: Iterable[dict[str, Any]]) -> list[str]:
    """Every namespace a chaos object selects pods in: its selector's and its network target's
    (Chaos Mesh selects `spec.target` pods too, pkg/selector)."""
    spaces: set[str] = set()
    for manifest in manifests:
        spec = manifest.get("spec") or {}
        if manifest.get("kind") == "Pod":
            continue
        spaces.update((spec.get("selector") or {}).get("namespaces") or [manifest["metadata"]["namespace"]])
        target = spec.get("target")
        if isinstance(target, dict):
            spaces.update((target.get("selector") or {}).get("namespaces") or [manifest["metadata"]["namespace"]])
    return sorted(spaces)


def _renders(fault: Any) -> bool:
    from kfchaos.faultspec.kinds import TRAFFIC_SIDE_TYPES

    return fault.type not in TRAFFIC_SIDE_TYPES
