"""Faults that need chaos-daemon, against the real Chaos Mesh controller (issue 21 §3.3). No chaos-daemon runs
on this cluster, as on a node without it: the controller selects the targets, its Apply fails, and it retries
without end, appending a Failed Apply event to the record each time and recording a Kubernetes Event
"Failed to apply chaos: <error>" (chaos-mesh/chaos-mesh controllers/common/records/controller.go,
controllers/utils/recorder/error.go). AllInjected simply stays False.

Each fault type goes through the stage step the pipeline runs (kfchaos.steps.stagefaults.under_faults: apply,
wait_injected, the activity watcher during the replay, removal), with an injection timeout of ten minutes: only
the failed attempts can end the wait. kfchaos must report "failed to inject: <the controller's message>" after a
handful of reads, and the stage's verdict, read back from the fault windows, must be INCONCLUSIVE."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kfchaos.faults.catalog import GROUP, PLURALS, VERSION
from kfchaos.faults.chaosmesh import HOST_ENV, INJECT_TIMEOUT_ENV, RECOVER_TIMEOUT_ENV
from kfchaos.spec import Experiment
from kfchaos.steps.seams import BACKEND_ENV
from kfchaos.steps.stagefaults import under_faults
from kfchaos.validate import parse_experiment
from kfchaos.verdict import Status
from tests.cluster.conftest import RealCluster
from tests.cluster.test_smoke import ensure_namespace, eventually
from tests.faults.test_daemon_faults import DAEMON_FAULTS, IDS, judge
from tests.verdict.builders import experiment_text

pytestmark = pytest.mark.cluster

NAMESPACE = "daemon-faults"
LABELS = {"app": "vllm"}  # tests/verdict/builders.py's target selector
# What the controller answered here. Network, IO and HTTP faults look for the node's chaos-daemon first
# (controllers/utils/chaosdaemon/chaosdaemon.go FindDaemonIP); stress, time and container-kill first look up the
# container's runtime id, which KWOK's pods do not have (pkg/selector/container), so they fail one step earlier.
# On a node with real containers and no daemon all six would name the daemon; either way Apply fails.
CONTROLLER_SAYS = {
    "network-delay": r"cannot find daemonIP on node kwok-node-\d",
    "io-latency": r"cannot find daemonIP on node kwok-node-\d",
    "http-delay": r"failed to apply for pod daemon-faults/\S+: cannot find daemonIP on node kwok-node-\d",
    "stress-cpu": r"container with id daemon-faults/\S+/vllm not found: container not found",
    "time-offset": r"container with id daemon-faults/\S+/vllm not found: container not found",
    "container-kill": r"container with id daemon-faults/\S+/vllm not found: container not found",
}


def stage_experiment(faults: list[dict[str, Any]], namespace: str, stage_duration: str = "30s") -> Experiment:
    """builders' experiment (one stage, 10 %), aimed at `namespace` on the real cluster."""
    text = experiment_text(stages=[10], faults=json.dumps(faults), stage_duration=stage_duration)
    return parse_experiment(text.replace("namespace: serving", f"namespace: {namespace}"), "stage-test.yaml")


def run_pods(real_cluster: RealCluster, namespace: str, name: str, replicas: int) -> None:
    """A Deployment of `replicas` pods labelled app=vllm on the KWOK nodes, waited for until Running."""
    ensure_namespace(real_cluster, namespace)
    apps = k8s.AppsV1Api(real_cluster.api_client())
    try:
        apps.create_namespaced_deployment(namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS},
                     "template": {"metadata": {"labels": LABELS},
                                  "spec": {"containers": [{"name": "vllm", "image": "example.invalid/vllm:1"}]}}},
        })  # fmt: skip
    except ApiException as error:
        if error.status != 409:
            raise
    eventually(f"{replicas} Running pods in {namespace}", lambda: len(running(real_cluster, namespace)) == replicas)


def running(real_cluster: RealCluster, namespace: str) -> dict[str, Any]:
    pods = k8s.CoreV1Api(real_cluster.api_client()).list_namespaced_pod(namespace, label_selector="app=vllm")
    return {
        p.metadata.name: p for p in pods.items if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    }


def on_the_cluster(monkeypatch: pytest.MonkeyPatch, real_cluster: RealCluster, inject: str, recover: str) -> None:
    """The environment a pipeline step reads its backend from (kfchaos.steps.seams.fault_backend)."""
    monkeypatch.setenv(BACKEND_ENV, "chaosmesh")
    monkeypatch.setenv("KUBECONFIG", str(real_cluster.admin_kubeconfig))
    monkeypatch.delenv(HOST_ENV, raising=False)
    monkeypatch.setenv(INJECT_TIMEOUT_ENV, inject)
    monkeypatch.setenv(RECOVER_TIMEOUT_ENV, recover)


def release(real_cluster: RealCluster, namespace: str) -> None:
    """Delete every chaos object left in `namespace`. A fault that never injected through the daemon stays
    Terminating on `chaos-mesh/records` (docs/cluster.md): its finalizers are cleared by hand, as that says."""
    custom = k8s.CustomObjectsApi(real_cluster.api_client())
    for plural in sorted(set(PLURALS.values())):
        for obj in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]:
            name = obj["metadata"]["name"]
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
            try:
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, {"metadata": {"finalizers": None}}
                )
            except ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture(scope="module")
def target(real_cluster: RealCluster) -> Iterator[RealCluster]:
    run_pods(real_cluster, NAMESPACE, "vllm-daemon", replicas=2)
    yield real_cluster
    release(real_cluster, NAMESPACE)


@pytest.mark.parametrize("fault", DAEMON_FAULTS, ids=IDS)
def test_a_fault_that_needs_chaos_daemon_fails_to_inject_at_once_and_its_stage_is_inconclusive(
    target: RealCluster, monkeypatch: pytest.MonkeyPatch, fault: dict[str, Any]
) -> None:
    on_the_cluster(monkeypatch, target, inject="10m", recover="3s")
    spec = stage_experiment([{**fault, "mode": "one"}], NAMESPACE)
    run_id = f"dmn-{uuid.uuid4().hex[:6]}"
    _, detail = under_faults(spec, run_id, 10, lambda: {"valid": True})
    (created,) = detail["chaos_objects"]
    error = created["injection"]["error"]
    assert "not injected after" not in error, error
    found = re.search(r"failed to inject: (.*) \(target (\S+): (\d+) failed Apply attempts in a row", error)
    assert found, error
    said, attempts = found.group(1), int(found.group(3))
    assert re.fullmatch(CONTROLLER_SAYS[fault["type"]], said), said
    assert attempts >= 3
    # The controller's own Kubernetes Event carries the same error (recorder.Failed: "Failed to apply chaos: ...").
    assert f"Failed: Failed to apply chaos: {said}" in created["events"], created["events"]
    # Reported within a few reads of the object, not after ten minutes of them (one read a second).
    reads = [e for e in created["api_events"] if e["verb"] == "get" and e["kind"] == PLURALS[created["kind"]]]
    assert 1 <= len(reads) <= 10, reads
    assert detail["fault_windows"][0]["verified"] == []
    verdict = judge(spec, 10, detail)
    check = verdict.stage(10).check("fault_active")
    assert check.status is Status.INCONCLUSIVE and check.gating, check.reason
    assert verdict.stage(10).status is Status.INCONCLUSIVE and verdict.status is Status.INCONCLUSIVE
