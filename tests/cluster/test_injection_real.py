"""Injection read from the real Chaos Mesh (issue 21 §3.2 and §3.3, first parts): pod-kill and pod-failure on a
Deployment's pods on KWOK nodes, their targets read from the real objects' records, the killed pod really gone
and replaced by the ReplicaSet; a fault that needs chaos-daemon (none runs here, as on a node without it) is
never reported injected, and kfchaos's message carries Chaos Mesh's reason."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client as k8s

from kfchaos.errors import KfchaosError
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.render import render_fault
from kfchaos.faults.retry import RetryPolicy
from tests.cluster.conftest import RealCluster
from tests.cluster.test_smoke import ensure_namespace, eventually
from tests.faults.experiments import experiment_with

pytestmark = pytest.mark.cluster

NAMESPACE = "llm-serving"  # tests/faults/experiments.py BASE target
LABELS = {"app.kubernetes.io/name": "vllm"}


@pytest.fixture(scope="module")
def target_pods(real_cluster: RealCluster) -> RealCluster:
    ensure_namespace(real_cluster, NAMESPACE)
    apps = k8s.AppsV1Api(real_cluster.api_client())
    name = "vllm-injection"
    apps.create_namespaced_deployment(NAMESPACE, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 3, "selector": {"matchLabels": {**LABELS, "suite": "injection"}},
                 "template": {"metadata": {"labels": {**LABELS, "suite": "injection"}},
                              "spec": {"containers": [{"name": "vllm", "image": "example.invalid/vllm:1"}]}}},
    })  # fmt: skip
    eventually("three Running target pods", lambda: len(running_pods(real_cluster)) == 3)
    return real_cluster


def running_pods(real_cluster: RealCluster) -> dict[str, Any]:
    pods = k8s.CoreV1Api(real_cluster.api_client()).list_namespaced_pod(NAMESPACE, label_selector="suite=injection")
    return {
        p.metadata.name: p for p in pods.items if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    }


def backend_for(real_cluster: RealCluster, fault: dict[str, Any]) -> tuple[ChaosMeshBackend, dict[str, Any], str]:
    experiment = experiment_with(fault)
    run_id = f"inj-{uuid.uuid4().hex[:6]}"
    backend = ChaosMeshBackend(
        real_cluster.api_client(), retry=RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.2),
        poll_interval=0.2, request_timeout=10, experiment=experiment, run_id=run_id, placement_checks=False,
    )  # fmt: skip
    manifest = render_fault(experiment, experiment.spec.faults[0], run_id)
    manifest["spec"]["selector"]["labelSelectors"]["suite"] = "injection"
    return backend, manifest, run_id


def test_pod_kill_really_kills_and_the_replicaset_replaces(target_pods: RealCluster) -> None:
    before = set(running_pods(target_pods))
    backend, manifest, run_id = backend_for(target_pods, {"name": "kill", "type": "pod-kill", "mode": "one"})
    report = backend.wait_injected(backend.apply(manifest), timeout=60)
    assert len(report.targets) == 1  # from the real object's records
    victim = report.targets[0].split("/")[1]
    assert victim in before
    eventually(
        "the killed pod gone and a replacement Running",
        lambda: victim not in running_pods(target_pods) and len(running_pods(target_pods)) == 3,
    )
    backend.sweep(run_id, [NAMESPACE], timeout=60)


def test_pod_failure_is_injected_into_the_pods_it_records(target_pods: RealCluster) -> None:
    backend, manifest, run_id = backend_for(
        target_pods, {"name": "fail", "type": "pod-failure", "mode": "fixed", "value": "2"}
    )
    report = backend.wait_injected(backend.apply(manifest), timeout=60)
    assert len(report.targets) == 2
    core = k8s.CoreV1Api(target_pods.api_client())
    for target in report.targets:
        pod = core.read_namespaced_pod(target.split("/")[1], NAMESPACE)
        # Chaos Mesh swaps the containers' image for its pause image (controllers/chaosimpl/podchaos/podfailure).
        assert all(c.image != "example.invalid/vllm:1" for c in pod.spec.containers), pod.spec.containers
    backend.sweep(run_id, [NAMESPACE], timeout=60)


def test_a_fault_that_needs_chaos_daemon_is_never_reported_injected(target_pods: RealCluster) -> None:
    fault = {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}}
    backend, manifest, _ = backend_for(target_pods, fault)
    handle = backend.apply(manifest)
    with pytest.raises(KfchaosError) as caught:
        backend.wait_injected(handle, timeout=10)
    assert "cannot find daemonIP on node kwok-node-" in str(caught.value)  # Chaos Mesh's own reason, passed on
