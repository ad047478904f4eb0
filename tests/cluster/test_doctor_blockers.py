"""`kfchaos doctor` against the real control plane, each blocker made by changing the cluster for real (issue 21
§3.6): a Chaos Mesh CRD removed, the Chaos Mesh controller stopped, a GPU node tainted where chaos-daemon has no
toleration. Each is reported by its check, the exit code is 1 (README "Exit codes": doctor exits 0 only when
every check passes), and each test puts the cluster back as it found it. The deleted fault RoleBinding and the
missing target Secret are in test_doctor_real.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from localcluster import chaoscontroller

from tests.cluster.conftest import ROOT, RealCluster, controlplane
from tests.cluster.test_doctor_real import EXPERIMENT, prepared  # noqa: F401  (the module fixture, reused)
from tests.cluster.test_rbac_real import TARGET_LABELS, TARGET_NAMESPACE
from tests.cluster.test_smoke import eventually

pytestmark = pytest.mark.cluster

WAIT = 60.0
CHAOS_NAMESPACE = chaoscontroller.CHAOS_NAMESPACE
CONTROLLER = "chaos-controller-manager"


def doctor(cluster: RealCluster, experiment: Path = EXPERIMENT) -> tuple[int, dict[str, dict[str, Any]]]:
    kfchaos = Path(sys.executable).parent / "kfchaos"
    done = subprocess.run(
        [str(kfchaos), "doctor", "--experiment", str(experiment), "--kubeconfig", str(cluster.admin_kubeconfig),
         "--prometheus", cluster.prometheus_url, "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, {check["name"]: check for check in json.loads(done.stdout)["checks"]}


def dry_run_admitted(cluster: RealCluster) -> bool:
    """A PodChaos created with dry run: answered by Chaos Mesh's webhooks (served by the controller process)."""
    body = {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": "PodChaos",
        "metadata": {"name": "probe", "namespace": TARGET_NAMESPACE},
        "spec": {"action": "pod-kill", "mode": "one", "selector": {"namespaces": [TARGET_NAMESPACE]}},
    }
    custom = k8s.CustomObjectsApi(cluster.api_client())
    try:
        custom.create_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "podchaos", body, dry_run="All"
        )
    except ApiException:
        return False
    return True


def test_the_release_and_admission_pass_on_the_healthy_cluster(prepared: RealCluster) -> None:  # noqa: F811
    _, checks = doctor(prepared)
    # The harness creates the Deployment a Helm install has (docs/cluster.md), with the release's image tag.
    assert checks["chaos mesh version"]["status"] == "PASS", checks["chaos mesh version"]
    assert "2.8.4" in checks["chaos mesh version"]["detail"]
    assert checks["chaos mesh admission"]["status"] == "PASS", checks["chaos mesh admission"]


# --- a CRD removed ---------------------------------------------------------------------------------------------


@pytest.fixture
def time_experiment(tmp_path: Path) -> Path:
    """The doctor experiment with a time-offset fault (TimeChaos): a kind no other cluster test keeps objects of."""
    text = EXPERIMENT.read_text()
    params = "        latency: 200ms\n        jitter: 20ms\n        correlation: 25%\n"
    assert "      type: network-delay\n" in text and params in text
    path = tmp_path / EXPERIMENT.name
    path.write_text(text.replace("type: network-delay", "type: time-offset").replace(params, "        offset: -5m\n"))
    return path


def test_a_removed_crd_is_reported(prepared: RealCluster, time_experiment: Path) -> None:  # noqa: F811
    ext = k8s.ApiextensionsV1Api(prepared.api_client())
    custom = k8s.CustomObjectsApi(prepared.api_client())
    name = "timechaos.chaos-mesh.org"
    saved = ext.read_custom_resource_definition(name)
    # Objects of the kind would hold the CRD's deletion by their finalizers (chaos-mesh/records): release them.
    for item in custom.list_cluster_custom_object("chaos-mesh.org", "v1alpha1", "timechaos")["items"]:
        meta = item["metadata"]
        patch: dict[str, Any] = {"metadata": {"finalizers": []}}
        custom.patch_namespaced_custom_object("chaos-mesh.org", "v1alpha1", meta["namespace"], "timechaos",
                                              meta["name"], patch)  # fmt: skip
        custom.delete_namespaced_custom_object("chaos-mesh.org", "v1alpha1", meta["namespace"], "timechaos",
                                               meta["name"])  # fmt: skip
    ext.delete_custom_resource_definition(name)
    try:
        eventually("the CRD gone", lambda: _absent(ext, name), WAIT)
        code, checks = doctor(prepared, time_experiment)
        assert checks["chaos mesh installed"]["status"] == "FAIL", checks["chaos mesh installed"]
        assert "no CRD for timechaos" in checks["chaos mesh installed"]["detail"]
        assert "helm install chaos-mesh" in checks["chaos mesh installed"]["fix"]
        assert code == 1
    finally:
        ext.create_custom_resource_definition(
            k8s.V1CustomResourceDefinition(
                metadata=k8s.V1ObjectMeta(name=name, labels=saved.metadata.labels),
                spec=saved.spec,
            )
        )
        eventually("the CRD established again", lambda: _established(ext, name), WAIT)
    _, checks = doctor(prepared, time_experiment)
    assert checks["chaos mesh installed"]["status"] == "PASS", checks["chaos mesh installed"]


def _absent(ext: k8s.ApiextensionsV1Api, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def _established(ext: k8s.ApiextensionsV1Api, name: str) -> bool:
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


# --- the controller stopped --------------------------------------------------------------------------------


def test_a_stopped_controller_is_reported(prepared: RealCluster) -> None:  # noqa: F811
    state = prepared.env.state
    argv, env = controlplane.procs.stop(state, CONTROLLER)
    try:
        code, checks = doctor(prepared)
        admission = checks["chaos mesh admission"]
        assert admission["status"] == "FAIL", admission
        assert "failed calling webhook" in admission["detail"]
        assert "chaos-controller-manager" in admission["fix"]
        assert code == 1
    finally:
        controlplane.procs.start(state, CONTROLLER, argv, env)
        eventually("Chaos Mesh's webhooks answering again", lambda: dry_run_admitted(prepared), WAIT)
    _, checks = doctor(prepared)
    assert checks["chaos mesh admission"]["status"] == "PASS", checks["chaos mesh admission"]


# --- a GPU node whose taint chaos-daemon does not tolerate ------------------------------------------------------


KWOK_DAEMON = "chaos-daemon-kwok"


@pytest.fixture
def daemon_and_gpu_pod(prepared: RealCluster) -> Iterator[RealCluster]:  # noqa: F811
    """chaos-daemon as the chart's DaemonSet (no tolerations: values.yaml chaosDaemon.tolerations is empty), its
    pods run by KWOK on the untainted nodes (a second DaemonSet beside the real node's own `chaos-daemon`, with the
    chart's labels, which doctor goes by); and a target pod on the tainted GPU node, as a vLLM pod asking for
    nvidia.com/gpu tolerates the taint. Both removed afterwards (test_doctor_real expects no daemon)."""
    apps = k8s.AppsV1Api(prepared.api_client())
    core = k8s.CoreV1Api(prepared.api_client())
    labels = {"app.kubernetes.io/name": "chaos-mesh", "app.kubernetes.io/component": "chaos-daemon"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": KWOK_DAEMON, "namespace": CHAOS_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "chaos-daemon", "image": chaoscontroller.CONTROLLER_IMAGE}]},
            },
        },
    }
    gpu_pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="vllm-gpu", labels=TARGET_LABELS),
        spec=k8s.V1PodSpec(
            node_name="kwok-gpu-0",
            tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
            containers=[
                k8s.V1Container(
                    name="vllm",
                    image="example.invalid/vllm:1",
                    resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                )
            ],
        ),
    )
    apps.create_namespaced_daemon_set(CHAOS_NAMESPACE, daemonset)
    core.create_namespaced_pod(TARGET_NAMESPACE, gpu_pod)
    try:
        eventually("chaos-daemon Running on both untainted nodes", lambda: _daemon_nodes(core) >= {
            "kwok-node-0", "kwok-node-1"}, WAIT)  # fmt: skip
        eventually("the GPU target pod Running", lambda: _phase(core, "vllm-gpu") == "Running", WAIT)
        yield prepared
    finally:
        apps.delete_namespaced_daemon_set(KWOK_DAEMON, CHAOS_NAMESPACE, propagation_policy="Foreground")
        core.delete_namespaced_pod("vllm-gpu", TARGET_NAMESPACE, grace_period_seconds=0)
        eventually("chaos-daemon and its pods gone", lambda: not _daemon_nodes(core, any_phase=True), WAIT)
        eventually("the GPU target pod gone", lambda: _phase(core, "vllm-gpu") is None, WAIT)


def _daemon_nodes(core: k8s.CoreV1Api, any_phase: bool = False) -> set[str]:
    """Nodes of the test's own DaemonSet's pods (not the real node's chaos-daemon, which stays)."""
    pods = core.list_namespaced_pod(CHAOS_NAMESPACE, label_selector="app.kubernetes.io/component=chaos-daemon")
    ours = [p for p in pods.items if any(o.name == KWOK_DAEMON for o in p.metadata.owner_references or [])]
    return {p.spec.node_name for p in ours if any_phase or p.status.phase == "Running"}


def _phase(core: k8s.CoreV1Api, name: str) -> str | None:
    try:
        return str(core.read_namespaced_pod(name, TARGET_NAMESPACE).status.phase)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_a_gpu_node_without_daemon_tolerations_is_reported(daemon_and_gpu_pod: RealCluster) -> None:
    code, checks = doctor(daemon_and_gpu_pod)
    daemon = checks["chaos-daemon on target nodes"]
    assert daemon["status"] == "FAIL", daemon
    assert (
        "no running chaos-daemon on node kwok-gpu-0 because of taint nvidia.com/gpu=present:NoSchedule"
        in (daemon["detail"])
    )
    assert "kwok-node-" not in daemon["detail"]  # the untainted nodes have their daemon
    assert "chaosDaemon.tolerations" in daemon["fix"]
    assert code == 1

    # The fix the check names: the chart's chaosDaemon.tolerations, as the DaemonSet's pod template carries it.
    apps = k8s.AppsV1Api(daemon_and_gpu_pod.api_client())
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    apps.patch_namespaced_daemon_set(
        KWOK_DAEMON, CHAOS_NAMESPACE, {"spec": {"template": {"spec": {"tolerations": [toleration]}}}}
    )
    core = k8s.CoreV1Api(daemon_and_gpu_pod.api_client())
    eventually("chaos-daemon Running on the GPU node", lambda: "kwok-gpu-0" in _daemon_nodes(core), WAIT)
    _, checks = doctor(daemon_and_gpu_pod)
    assert checks["chaos-daemon on target nodes"]["status"] == "PASS", checks["chaos-daemon on target nodes"]
