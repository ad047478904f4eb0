"""Runs that share a target never overlap (issue 37), on the real kube-apiserver as kfchaos-runner under the real
RBAC of manifests/: the target's coordination.k8s.io/v1 Lease taken by the preflight step, a second run of another
experiment queueing behind it and running once it is released, a run that gives up at its deadline
INCONCLUSIVE "target busy" having touched nothing, and a SIGKILLed holder taken over once its lease expired, its
chaos objects removed by the new holder. The same rules on a lock file: tests/lease/test_local_lock.py."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from kfchaos.lease import LeaseRecord, lease_name
from kfchaos.steps import targetlease
from kfchaos.steps.context import experiment_from_text
from kfchaos.steps.setup import preflight
from tests.cluster.conftest import ROOT, RealCluster
from tests.cluster.test_rbac_real import TARGET_LABELS, _target_pods, rbac_applied  # noqa: F401 (a fixture)
from tests.cluster.test_smoke import eventually
from tests.faults.experiments import BASE
from tests.manifests.test_rbac import TARGET_NAMESPACE

pytestmark = pytest.mark.cluster

LEASE = lease_name(TARGET_NAMESPACE, TARGET_LABELS, [])
KILL = {"name": "kill", "type": "pod-kill", "mode": "one"}


def experiment_text(name: str, wait: str = "2h", *faults: dict[str, Any]) -> str:
    data = copy.deepcopy(BASE)
    data["metadata"]["name"] = name
    data["spec"]["faults"] = list(faults) or [KILL]
    data["spec"]["safety"]["wait_for_target"] = wait
    return yaml.safe_dump(data)


def read_lease(cluster: RealCluster) -> LeaseRecord:
    api = k8s.CoordinationV1Api(cluster.api_client())
    raw = api.read_namespaced_lease(LEASE, TARGET_NAMESPACE, _preload_content=False).data
    return LeaseRecord.from_object(json.loads(raw))


@pytest.fixture
def as_runner(rbac_applied: RealCluster, monkeypatch: pytest.MonkeyPatch) -> RealCluster:  # noqa: F811
    """Steps run as kfchaos-runner (its kubeconfig), with short leases, on a target with pods and no lease yet."""
    _target_pods(rbac_applied)
    monkeypatch.setenv("KUBECONFIG", str(rbac_applied.runner_kubeconfig))
    monkeypatch.setenv("KFCHAOS_LEASE_DURATION", "3s")
    api = k8s.CoordinationV1Api(rbac_applied.api_client())
    try:
        api.delete_namespaced_lease(LEASE, TARGET_NAMESPACE)
    except k8s.ApiException as error:
        if error.status != 404:
            raise
    return rbac_applied


def test_a_second_run_of_another_experiment_waits_and_runs_after_the_first_releases(
    as_runner: RealCluster, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first_text, second_text = experiment_text("nightly-delay"), experiment_text("pr-gate-kill")
    first_id, second_id = f"run-a-{uuid.uuid4().hex[:6]}", f"run-b-{uuid.uuid4().hex[:6]}"
    first = json.loads(preflight(first_text, first_id))
    assert first["lease"]["status"] == "held" and first["lease"]["lease"] == f"Lease {TARGET_NAMESPACE}/{LEASE}"
    held = read_lease(as_runner)
    assert held.holder_identity == first_id and held.holder is not None and held.holder.experiment == "nightly-delay"

    second: dict[str, Any] = {}
    waiting = threading.Thread(target=lambda: second.update(json.loads(preflight(second_text, second_id))))
    waiting.start()
    eventually("the second run in the Lease's queue", lambda: [w.run_id for w in read_lease(as_runner).waiting])
    assert [w.run_id for w in read_lease(as_runner).waiting] == [second_id]
    with targetlease.holding(experiment_from_text(second_text), second_id, "") as lease:
        assert lease.lost and f"held by run {first_id} of nightly-delay" in lease.lost  # no step of it acts meanwhile
    experiment_file = tmp_path / "pr-gate-kill.yaml"
    experiment_file.write_text(second_text)
    shown = subprocess.run(
        [sys.executable, "-m", "kfchaos", "status", str(experiment_file)],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"(Lease {TARGET_NAMESPACE}/{LEASE})" in shown.stdout
    assert f"held by run {first_id} of nightly-delay (KFP run {first_id}) since " in shown.stdout
    assert f"waiting: run {second_id} of pr-gate-kill" in shown.stdout
    assert "released" in targetlease.release(experiment_from_text(first_text), first_id, "")
    waiting.join(timeout=120)
    assert second["lease"]["status"] == "held" and second["lease"]["how"] == "acquired"
    record = read_lease(as_runner)
    assert record.holder_identity == second_id and record.waiting == []
    assert [e.run_id for e in record.history] == [first_id]
    said = capfd.readouterr().err
    assert f"target busy: held by run {first_id} of nightly-delay" in said and "since " in said
    targetlease.release(experiment_from_text(second_text), second_id, "")


def test_a_run_still_queued_at_its_deadline_ends_target_busy_and_touches_nothing(as_runner: RealCluster) -> None:
    holder_id, late_id = f"run-h-{uuid.uuid4().hex[:6]}", f"run-l-{uuid.uuid4().hex[:6]}"
    holder_text = experiment_text("holder")
    assert json.loads(preflight(holder_text, holder_id))["lease"]["status"] == "held"
    stop = threading.Event()

    def renew() -> None:  # the holder lives: a step of it renews, as `targetlease.holding` does
        with targetlease.holding(experiment_from_text(holder_text), holder_id, ""):
            stop.wait(60)

    living = threading.Thread(target=renew)
    living.start()
    try:
        late = json.loads(preflight(experiment_text("late", "5s"), late_id))
    finally:
        stop.set()
        living.join()
    busy = late["lease"]
    assert busy["status"] == "busy"
    assert busy["reason"].startswith(f"target busy: held by run {holder_id} of holder (KFP run {holder_id}) since ")
    assert "backend" in late and "not checked" in late["backend"]  # not even a server-side dry run
    custom = k8s.CustomObjectsApi(as_runner.api_client())
    mine = custom.list_namespaced_custom_object(
        "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "podchaos", label_selector=f"kfchaos.io/run-id={late_id}"
    )
    assert mine["items"] == []
    record = read_lease(as_runner)
    assert record.holder_identity == holder_id and "gave up" in (record.ended(late_id) or record.history[0]).outcome
    targetlease.release(experiment_from_text(holder_text), holder_id, "")


DEAD_HOLDER = textwrap.dedent(
    """
    import json, sys, time
    from kfchaos.steps import seams
    from kfchaos.steps.context import experiment_from_text
    from kfchaos.steps.setup import preflight
    text, run_id = sys.stdin.read(), sys.argv[1]
    print(json.dumps(json.loads(preflight(text, run_id))["lease"]), flush=True)
    experiment = experiment_from_text(text)
    seams.fault_backend(experiment, run_id).apply(experiment.spec.faults[0])
    print("injected", flush=True)
    time.sleep(600)
    """
)


def test_a_sigkilled_holder_is_taken_over_after_its_lease_expires_and_its_faults_are_removed(
    as_runner: RealCluster,
) -> None:
    dead_id, taker_id = f"run-dead-{uuid.uuid4().hex[:6]}", f"run-take-{uuid.uuid4().hex[:6]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", DEAD_HOLDER, dead_id], cwd=ROOT, env=dict(os.environ),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    custom = k8s.CustomObjectsApi(as_runner.api_client())

    def dead_objects() -> list[Any]:
        return list(custom.list_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "podchaos", label_selector=f"kfchaos.io/run-id={dead_id}"
        )["items"])  # fmt: skip

    try:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write(experiment_text("killed-mid-stage"))
        holder.stdin.close()
        assert json.loads(holder.stdout.readline())["status"] == "held"
        assert holder.stdout.readline().strip() == "injected"
        assert len(dead_objects()) == 1
        os.kill(holder.pid, signal.SIGKILL)  # no exit handler runs: the lease stays, unrenewed
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert read_lease(as_runner).holder_identity == dead_id
    taken = json.loads(preflight(experiment_text("next-run"), taker_id))["lease"]
    assert taken["status"] == "held" and taken["how"] == "taken over"
    assert taken["waited"] >= 3  # a full lease duration (KFCHAOS_LEASE_DURATION) on the taker's own clock
    assert taken["took_over"]["run_id"] == dead_id and taken["took_over"]["swept"] == 1
    assert dead_objects() == []
    record = read_lease(as_runner)
    assert record.holder_identity == taker_id
    assert f"taken over by run {taker_id}" in (record.ended(dead_id) or record.history[-1]).outcome
    targetlease.release(experiment_from_text(experiment_text("next-run")), taker_id, "")
