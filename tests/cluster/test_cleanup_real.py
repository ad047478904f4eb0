"""Cleanup with Chaos Mesh's real finalizer (issue 21 §3.4, first part): a fault that never injected (no
chaos-daemon here) keeps `chaos-mesh/records` after deletion, because its records never reach "Not Injected"
(controllers/common/finalizers/controller.go, CleanReconciler); `kfchaos cleanup` must not report it gone."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from tests.cluster.conftest import ROOT, RealCluster
from tests.cluster.test_rbac_real import TARGET_NAMESPACE, _target_pods
from tests.cluster.test_smoke import eventually

pytestmark = pytest.mark.cluster


@pytest.fixture
def stuck_fault(real_cluster: RealCluster) -> Iterator[tuple[str, str]]:
    """(run id, object name) of a NetworkChaos that cannot inject, deleted by nobody yet."""
    _target_pods(real_cluster)
    run_id = f"stuck-{uuid.uuid4().hex[:6]}"
    kfchaos = Path(sys.executable).parent / "kfchaos"
    rendered = subprocess.run(
        [str(kfchaos), "render", str(ROOT / "experiments" / "vllm-network-delay.yaml"), "--run-id", run_id],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    manifest = next(doc for doc in yaml.safe_load_all(rendered) if doc)
    api = k8s.CustomObjectsApi(real_cluster.api_client())
    api.create_namespaced_custom_object("chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "networkchaos", manifest)
    name = manifest["metadata"]["name"]
    eventually(
        "Chaos Mesh's finalizer on the object",
        lambda: "chaos-mesh/records" in (api.get_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "networkchaos", name)["metadata"].get("finalizers") or []),
    )  # fmt: skip
    yield run_id, name
    # Released by hand, as an operator would once the fault is known not to be applied anywhere.
    api.patch_namespaced_custom_object(
        "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "networkchaos", name, {"metadata": {"finalizers": []}}
    )


def cleanup(cluster: RealCluster, run_id: str) -> subprocess.CompletedProcess[str]:
    kfchaos = Path(sys.executable).parent / "kfchaos"
    return subprocess.run(
        [str(kfchaos), "cleanup", "--run-id", run_id, "--namespace", TARGET_NAMESPACE, "--timeout", "5s",
         "--kubeconfig", str(cluster.admin_kubeconfig)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_cleanup_does_not_report_a_stuck_fault_gone(real_cluster: RealCluster, stuck_fault: tuple[str, str]) -> None:
    run_id, name = stuck_fault
    done = cleanup(real_cluster, run_id)
    assert done.returncode != 0
    assert name in done.stderr + done.stdout


def test_cleanup_names_the_finalizer_that_holds_a_stuck_fault_and_a_remedy_that_works_here(
    real_cluster: RealCluster, stuck_fault: tuple[str, str]
) -> None:
    """The object is held by chaos-mesh/records; the cleanFinalizer=forced annotation is not acted on while Chaos
    Mesh's records step keeps requeueing (controllers/common/step.go, controllers/common/pipeline/pipeline.go), so
    the remedy kfchaos names is removing the finalizer."""
    done = cleanup(real_cluster, stuck_fault[0])
    said = done.stderr + done.stdout
    assert "chaos-mesh/records" in said
    assert "kubectl patch" in said and '"finalizers":null' in said


def test_the_backend_reads_a_list_longer_than_a_page_from_the_real_api_server(real_cluster: RealCluster) -> None:
    """Lists are paged (kfchaos.faults.kubeclient.LIST_PAGE objects, then `metadata.continue`): the real API server
    pages them so too, and every object of the run is found, once."""
    from kfchaos.faults.chaosmesh import ChaosMeshBackend
    from kfchaos.faults.kubeclient import LIST_PAGE
    from kfchaos.faults.naming import run_selector

    _target_pods(real_cluster)
    run_id = f"paged-{uuid.uuid4().hex[:6]}"
    kfchaos = Path(sys.executable).parent / "kfchaos"
    rendered = subprocess.run(
        [str(kfchaos), "render", str(ROOT / "experiments" / "vllm-network-delay.yaml"), "--run-id", run_id],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    manifest = next(doc for doc in yaml.safe_load_all(rendered) if doc)
    api = k8s.CustomObjectsApi(real_cluster.api_client())
    args = ("chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "networkchaos")
    names = [f"{manifest['metadata']['name'][:50]}-{index}" for index in range(LIST_PAGE + 3)]
    for name in names:
        api.create_namespaced_custom_object(*args, {**manifest, "metadata": {**manifest["metadata"], "name": name}})
    try:
        backend = ChaosMeshBackend.from_config(kubeconfig=str(real_cluster.admin_kubeconfig))
        listed = backend.list_objects("networkchaos", TARGET_NAMESPACE, run_selector(run_id)) or []
        assert sorted(item["metadata"]["name"] for item in listed) == sorted(names)
        pages = [e for e in backend.events if e.verb == "list" and e.kind == "networkchaos"]
        assert len(pages) == 2, "the real API server did not page the list"
    finally:
        for name in names:  # the objects never inject here: their finalizer goes by hand, as an operator's would
            api.delete_namespaced_custom_object(*args, name)
            with contextlib.suppress(k8s.ApiException):  # gone already when no finalizer held it
                api.patch_namespaced_custom_object(*args, name, {"metadata": {"finalizers": []}})
