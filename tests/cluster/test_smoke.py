"""The control plane is what it says (issue 21, "Done when"): KWOK nodes, Chaos Mesh's CRDs served, its webhook
refusing what it refuses (the webhook, not the schema), a Deployment's pods created, scheduled and replaced,
kube-state-metrics scraped by Prometheus, and kfchaos-runner a real, RBAC-checked identity."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.cluster.conftest import RealCluster

pytestmark = pytest.mark.cluster

VENDORED_CRDS = Path(__file__).resolve().parents[2] / "src" / "kfchaos" / "data" / "chaos-mesh" / "crds"
WAIT = 60.0


def eventually(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """Poll `check` until it returns something truthy; bounded (a missing outcome fails, a slow one does not)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached within {timeout:g}s (last: {last!r})")


def test_kwok_nodes_are_listed_and_ready(real_cluster: RealCluster) -> None:
    nodes = {n.metadata.name: n for n in k8s.CoreV1Api(real_cluster.api_client()).list_node().items}
    assert {"kwok-node-0", "kwok-node-1", "kwok-gpu-0"} <= set(nodes)
    for node in nodes.values():
        ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready and ready[0].status == "True", node.metadata.name
    gpu = nodes["kwok-gpu-0"]
    assert gpu.status.capacity["nvidia.com/gpu"] == "8"
    assert [(t.key, t.effect) for t in gpu.spec.taints] == [("nvidia.com/gpu", "NoSchedule")]


def test_the_chaos_mesh_crds_are_served(real_cluster: RealCluster) -> None:
    served = {
        c.metadata.name
        for c in k8s.ApiextensionsV1Api(real_cluster.api_client()).list_custom_resource_definition().items
        if c.spec.group == "chaos-mesh.org"
    }
    vendored = {path.name.removeprefix("chaos-mesh.org_").removesuffix(".yaml") + ".chaos-mesh.org"
                for path in VENDORED_CRDS.glob("*.yaml")}  # fmt: skip
    assert vendored and vendored <= served


def pod_chaos(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": "PodChaos",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "action": "pod-kill",
            "mode": "one",
            "selector": {"namespaces": [namespace], "labelSelectors": {"app": "nothing-here"}},
            **spec,
        },
    }


def test_the_webhook_refuses_what_the_schema_admits(real_cluster: RealCluster) -> None:
    """mode fixed-percent with value "12.5": a string the CRD schema admits, that Chaos Mesh's validating
    webhook refuses (api/v1alpha1/common_webhook.go, strconv.Atoi) on dry run and on create."""
    api = k8s.CustomObjectsApi(real_cluster.api_client())
    namespace = ensure_namespace(real_cluster, "smoke")
    bad = pod_chaos(namespace, "bad-value", mode="fixed-percent", value="12.5")
    for dry_run in ("All", None):
        with pytest.raises(ApiException) as caught:
            api.create_namespaced_custom_object("chaos-mesh.org", "v1alpha1", namespace, "podchaos", bad,
                                                dry_run=dry_run)  # fmt: skip
        assert caught.value.status == 403
        assert 'admission webhook "vpodchaos.kb.io" denied the request' in status_message(caught.value)
    good = pod_chaos(namespace, "good-value", mode="fixed-percent", value="50")
    created = api.create_namespaced_custom_object("chaos-mesh.org", "v1alpha1", namespace, "podchaos", good)
    assert created["metadata"]["name"] == "good-value"
    api.delete_namespaced_custom_object("chaos-mesh.org", "v1alpha1", namespace, "podchaos", "good-value")


def status_message(error: ApiException) -> str:
    """The message of the API server's Status answer."""
    return str(json.loads(error.body)["message"])


def ensure_namespace(real_cluster: RealCluster, name: str) -> str:
    core = k8s.CoreV1Api(real_cluster.api_client())
    try:
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    except ApiException as error:
        if error.status != 409:
            raise
    return name


def test_a_deployments_pods_run_on_kwok_nodes_and_are_replaced(real_cluster: RealCluster) -> None:
    namespace = ensure_namespace(real_cluster, "smoke")
    apps = k8s.AppsV1Api(real_cluster.api_client())
    core = k8s.CoreV1Api(real_cluster.api_client())
    name = f"web-{uuid.uuid4().hex[:6]}"
    labels = {"app": name}
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]}}},
    })  # fmt: skip

    def running() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"app={name}").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
        return live if len(live) == 2 else []

    pods = eventually("two Running pods", running)
    assert all(p.spec.node_name in {"kwok-node-0", "kwok-node-1"} for p in pods)  # not the tainted GPU node
    victim = pods[0].metadata.name
    core.delete_namespaced_pod(victim, namespace)
    replaced = eventually(
        "the ReplicaSet replacing the deleted pod",
        lambda: (lambda live: live if victim not in {p.metadata.name for p in live} else [])(running()),
    )
    assert len(replaced) == 2
    apps.delete_namespaced_deployment(name, namespace)


def test_kube_state_metrics_is_scraped_by_prometheus(real_cluster: RealCluster) -> None:
    def nodes_seen() -> set[str]:
        query = urllib.parse.urlencode({"query": "kube_node_info"})
        with urllib.request.urlopen(f"{real_cluster.prometheus_url}/api/v1/query?{query}", timeout=5) as response:
            result = json.loads(response.read())["data"]["result"]
        return {series["metric"]["node"] for series in result}

    seen = eventually("kube_node_info in Prometheus", nodes_seen)
    assert {"kwok-node-0", "kwok-node-1", "kwok-gpu-0"} <= seen


def test_the_runner_identity_is_checked_by_real_rbac(real_cluster: RealCluster) -> None:
    """kfchaos-runner's token authenticates as the ServiceAccount; without a binding, RBAC says 403."""
    runner = k8s.CoreV1Api(real_cluster.api_client("runner"))
    with pytest.raises(ApiException) as caught:
        runner.list_namespaced_pod("kube-system")
    assert caught.value.status == 403
    assert "system:serviceaccount:kubeflow:kfchaos-runner" in caught.value.body
