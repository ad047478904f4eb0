"""The placement rules (kfchaos.faults.clustercheck) against the loopback API server: chaos-daemon on the
target pods' nodes, taints it does not tolerate, and Chaos Mesh's namespace filter."""

from __future__ import annotations

from typing import Any

from kfchaos.faults import clustercheck
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import KubeApiServer, kubernetes_client

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": taints or []}}


def cluster(server: KubeApiServer, tolerations: list[dict[str, Any]] | None = None) -> None:
    """Two GPU nodes tainted as GPU node pools are; one CPU node. The server plays the DaemonSet controller
    for chaos-daemon with the chart's `chaosDaemon.tolerations`."""
    server.daemon_tolerations = tolerations or []
    server.add_object("nodes", node("cpu-0"))
    for name in ("gpu-0", "gpu-1"):
        server.add_object("nodes", node(name, [GPU_TAINT]))
    for index in range(2):
        server.add_pod("llm-serving", f"vllm-{index}", {"app.kubernetes.io/name": "vllm"}, node=f"gpu-{index}")


def test_helm_default_tolerations_leave_gpu_nodes_without_chaos_daemon() -> None:
    with KubeApiServer() as server:
        cluster(server)  # chart default: chaosDaemon.tolerations: []
        gaps = clustercheck.daemon_gaps(kubernetes_client(server.url), ["gpu-0", "gpu-1", "cpu-0"])
    assert len(gaps) == 2
    assert "node gpu-0" in gaps[0] and "nvidia.com/gpu=present:NoSchedule" in gaps[0]
    assert "cannot find daemonIP on node gpu-0" in gaps[0] and "chaosDaemon.tolerations" in gaps[0]


def test_tolerating_the_gpu_taint_covers_the_nodes() -> None:
    with KubeApiServer() as server:
        cluster(server, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
        assert clustercheck.daemon_gaps(kubernetes_client(server.url), ["gpu-0", "gpu-1"]) == []


def test_no_daemonset_at_all_is_named() -> None:
    with KubeApiServer(chaos_daemon=False) as server:
        server.add_pod("llm-serving", "vllm-0", {"app.kubernetes.io/name": "vllm"}, node="gpu-0")
        (gap,) = clustercheck.daemon_gaps(kubernetes_client(server.url), ["gpu-0"])
    assert "no chaos-daemon DaemonSet" in gap


def test_toleration_matching_follows_kubernetes() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert clustercheck.tolerates([{"operator": "Exists"}], taint)
    assert clustercheck.tolerates([{"key": "k", "operator": "Exists"}], taint)
    assert clustercheck.tolerates([{"key": "k", "value": "v"}], taint)
    assert not clustercheck.tolerates([{"key": "k", "value": "w"}], taint)
    assert not clustercheck.tolerates([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], taint)
    assert not clustercheck.tolerates([], taint)


def controller(filter_on: bool) -> dict[str, Any]:
    env = [{"name": "ENABLE_FILTER_NAMESPACE", "value": "true" if filter_on else "false"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "chaos-controller-manager",
            "namespace": "chaos-mesh",
            "labels": {"app.kubernetes.io/component": "controller-manager"},
        },
        "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "x", "env": env}]}}},
    }


def namespace(name: str, annotated: bool) -> dict[str, Any]:
    annotations = {"chaos-mesh.org/inject": "enabled"} if annotated else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


def test_namespace_filter_needs_the_annotation_on_every_selected_namespace() -> None:
    with KubeApiServer() as server:
        server.add_object("deployments", controller(filter_on=True))
        server.add_object("namespaces", namespace("llm-serving", annotated=True))
        server.add_object("namespaces", namespace("gateway", annotated=False))
        api = kubernetes_client(server.url)
        assert clustercheck.namespace_filter_gaps(api, ["llm-serving"]) == []
        (gap,) = clustercheck.namespace_filter_gaps(api, ["llm-serving", "gateway"])
        assert "namespace gateway lacks the annotation chaos-mesh.org/inject=enabled" in gap


def test_namespace_filter_off_needs_nothing() -> None:
    with KubeApiServer() as server:
        server.add_object("deployments", controller(filter_on=False))
        server.add_object("namespaces", namespace("gateway", annotated=False))
        assert clustercheck.namespace_filter_gaps(kubernetes_client(server.url), ["gateway"]) == []


def test_doctor_rows_cover_the_network_target_namespace() -> None:
    experiment = experiment_with(
        {
            "name": "cut",
            "type": "network-delay",
            "mode": "all",
            "params": {
                "latency": "100ms",
                "direction": "both",
                "target": {"namespace": "gateway", "labels": {"app": "envoy"}},
            },
        }
    )
    with KubeApiServer() as server:
        cluster(server)
        server.add_object("deployments", controller(filter_on=True))
        server.add_object("namespaces", namespace("llm-serving", annotated=True))
        server.add_object("namespaces", namespace("gateway", annotated=False))
        api = kubernetes_client(server.url)
        pods = server.objects("pods", "llm-serving")
        rows = {name: (passed, detail) for name, passed, detail, _ in clustercheck.doctor_checks(api, experiment, pods)}
    assert rows["chaos-daemon on target nodes"][0] is False
    assert "nvidia.com/gpu" in rows["chaos-daemon on target nodes"][1]
    assert rows["namespace filter annotation"] == (False, rows["namespace filter annotation"][1])
    assert "gateway" in rows["namespace filter annotation"][1]
    assert "llm-serving lacks" not in rows["namespace filter annotation"][1]
