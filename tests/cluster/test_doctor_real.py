"""`kfchaos doctor` against the real control plane (issue 21 §3.6, first parts): with manifests/ applied and the
target deployed, the run identity's permissions, Chaos Mesh's CRDs, the target pods and kube-state-metrics'
series pass, and the missing chaos-daemon fails; a blocker made by changing the cluster for real (the fault
RoleBinding deleted, the target Secret missing) is reported, and clears when the cluster is fixed."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kfchaos.targetauth import TARGET_SECRET, TARGET_SECRET_KEY
from tests.cluster.conftest import ROOT, RealCluster
from tests.cluster.test_rbac_real import TARGET_NAMESPACE, _target_pods, apply_all
from tests.cluster.test_smoke import eventually
from tests.manifests.test_manifests import MANIFESTS, kustomize_build
from tests.manifests.test_rbac import KFP_NAMESPACE, UPSTREAM_KFP_RBAC

pytestmark = pytest.mark.cluster

EXPERIMENT = ROOT / "experiments" / "vllm-network-delay.yaml"  # spec.target.auth set: the Secret is needed


@pytest.fixture(scope="module")
def prepared(real_cluster: RealCluster) -> RealCluster:
    objects = kustomize_build(MANIFESTS) + UPSTREAM_KFP_RBAC
    apply_all(real_cluster.api_client(), [o for o in objects if o["kind"] == "Namespace"])
    apply_all(real_cluster.api_client(), [o for o in objects if o["kind"] != "Namespace"])
    _target_pods(real_cluster)

    def scraped() -> bool:
        query = urllib.parse.urlencode(
            {"query": f'kube_pod_container_status_restarts_total{{namespace="{TARGET_NAMESPACE}"}}'}
        )
        with urllib.request.urlopen(f"{real_cluster.prometheus_url}/api/v1/query?{query}", timeout=5) as response:
            return bool(json.loads(response.read())["data"]["result"])

    eventually("kube-state-metrics' target pod series in Prometheus", scraped)
    return real_cluster


def doctor(cluster: RealCluster) -> tuple[int, dict[str, dict[str, Any]]]:
    kfchaos = Path(sys.executable).parent / "kfchaos"
    done = subprocess.run(
        [str(kfchaos), "doctor", "--experiment", str(EXPERIMENT), "--kubeconfig", str(cluster.admin_kubeconfig),
         "--prometheus", cluster.prometheus_url, "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, {check["name"]: check for check in json.loads(done.stdout)["checks"]}


def status(checks: dict[str, dict[str, Any]], name: str) -> str:
    return str(checks[name]["status"])


def test_doctor_on_the_real_cluster(prepared: RealCluster) -> None:
    code, checks = doctor(prepared)
    for name in (
        "run identity",
        f"permissions {KFP_NAMESPACE} (KFP runtime)",
        f"permissions {TARGET_NAMESPACE} (faults)",
        "permissions cluster (cluster-wide)",
        "chaos mesh installed",
        "target pods",
        "series kube_pod_container_status_restarts_total",
        "series kube_deployment_status_observed_generation",
    ):
        assert status(checks, name) == "PASS", checks[name]
    daemon = checks["chaos-daemon on target nodes"]
    assert daemon["status"] == "FAIL" and "kwok-node-" in daemon["detail"]
    assert code == 1  # not every check passes (no chaos-daemon, no vLLM series here): README, exit 0 only when all pass


def test_a_deleted_fault_binding_is_reported_and_clears(prepared: RealCluster) -> None:
    rbac = k8s.RbacAuthorizationV1Api(prepared.api_client())
    binding = rbac.read_namespaced_role_binding("kfchaos-fault-injector", TARGET_NAMESPACE)
    rbac.delete_namespaced_role_binding("kfchaos-fault-injector", TARGET_NAMESPACE)
    try:
        _, checks = doctor(prepared)
        check = checks[f"permissions {TARGET_NAMESPACE} (faults)"]
        assert check["status"] == "FAIL"
        assert "may not: create podchaos.chaos-mesh.org" in check["detail"]
    finally:
        binding.metadata = k8s.V1ObjectMeta(name=binding.metadata.name, namespace=TARGET_NAMESPACE)
        rbac.create_namespaced_role_binding(TARGET_NAMESPACE, binding)
    _, checks = doctor(prepared)
    assert status(checks, f"permissions {TARGET_NAMESPACE} (faults)") == "PASS"


def test_a_missing_target_secret_is_reported_and_clears(prepared: RealCluster) -> None:
    core = k8s.CoreV1Api(prepared.api_client())
    try:
        core.delete_namespaced_secret(TARGET_SECRET, KFP_NAMESPACE)
    except ApiException as error:
        if error.status != 404:
            raise
    _, checks = doctor(prepared)
    assert status(checks, "target secret") == "FAIL"
    assert f"Secret {KFP_NAMESPACE}/{TARGET_SECRET} missing" in checks["target secret"]["detail"]
    core.create_namespaced_secret(
        KFP_NAMESPACE,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=TARGET_SECRET), string_data={TARGET_SECRET_KEY: "a-token"}),
    )
    _, checks = doctor(prepared)
    assert status(checks, "target secret") == "PASS", checks["target secret"]
