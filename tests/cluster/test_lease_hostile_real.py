"""Leases planted on the target (issue 46, class 1), on the real kube-apiserver with the real RBAC of manifests/:
the Lease is planted (or edited) as an administrator, and the run it meets is the pipeline's preflight step as
kfchaos-runner, the code path every run takes. Each planted shape gets the rule docs/reliability.md states ("round 4,
class 1"): a waiting run keeps its own deadline (`spec.safety.wait_for_target`), the target is taken over once the
planted holder's lease expired on the waiter's clock (leaseDurationSeconds honoured up to MAX_LEASE_DURATION, here
cut to 6 s), a Lease or holder kfchaos did not write is named as such, and no chaos object of another run is deleted.
The same rules with a clock the test turns: tests/lease/test_lease_hostile.py."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from kfchaos.lease import queue
from kfchaos.lease.record import micro_time
from kfchaos.steps import seams, targetlease
from kfchaos.steps.context import experiment_from_text
from kfchaos.steps.setup import preflight
from tests.cluster.conftest import RealCluster
from tests.cluster.test_rbac_real import rbac_applied  # noqa: F401 (a fixture)
from tests.cluster.test_target_lease_real import LEASE, as_runner, experiment_text, read_lease  # noqa: F401
from tests.manifests.test_rbac import TARGET_NAMESPACE

pytestmark = pytest.mark.cluster

WHERE = f"Lease {TARGET_NAMESPACE}/{LEASE}"
CAP = 6  # MAX_LEASE_DURATION for these tests: a planted duration over it is honoured this long
NOT_OURS = f"{WHERE} is not kfchaos's (it has no label app.kubernetes.io/managed-by=kfchaos)"
OTHER_TARGET = {"app.kubernetes.io/name": "other-model"}  # target B, beside the target (TARGET_LABELS) in its namespace


@pytest.fixture
def planted_on(as_runner: RealCluster, monkeypatch: pytest.MonkeyPatch) -> RealCluster:  # noqa: F811
    """kfchaos-runner's steps with 3 s leases (as_runner), the honoured duration cut from an hour to CAP seconds."""
    monkeypatch.setattr(queue, "MAX_LEASE_DURATION", CAP)
    return as_runner


def leases(cluster: RealCluster) -> k8s.CoordinationV1Api:
    return k8s.CoordinationV1Api(cluster.api_client())  # the administrator's: whoever planted the Lease


def plant(cluster: RealCluster, holder: str, duration: int = 3, **meta: Any) -> None:
    """A Lease on the target as another writer leaves it: taken now, its labels and annotations as given."""
    now = micro_time(time.time())
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": now, "renewTime": now,
            "leaseTransitions": 0}  # fmt: skip
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": TARGET_NAMESPACE, **meta}, "spec": spec}  # fmt: skip
    leases(cluster).create_namespaced_lease(TARGET_NAMESPACE, body)


def edit(cluster: RealCluster, spec: dict[str, Any]) -> None:
    """A merge patch of the Lease's spec (RFC 7386): what `kubectl patch lease --type=merge` sends."""
    leases(cluster).patch_namespaced_lease(LEASE, TARGET_NAMESPACE, {"spec": spec})


def run_objects(cluster: RealCluster, run_id: str) -> list[str]:
    """The names of a run's PodChaos objects in the target's namespace."""
    found = k8s.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "podchaos", label_selector=f"kfchaos.io/run-id={run_id}"
    )
    return [o["metadata"]["name"] for o in found["items"]]


@pytest.fixture
def live_run(planted_on: RealCluster) -> Iterator[str]:
    """A run alive elsewhere with a fault in the target's namespace, made by kfchaos's own backend as that run does
    (its objects carry its run id); swept at the end."""
    run_id = f"run-live-{uuid.uuid4().hex[:6]}"
    experiment = experiment_from_text(experiment_text("alive-elsewhere"))
    seams.fault_backend(experiment, run_id).apply(experiment.spec.faults[0])
    assert len(run_objects(planted_on, run_id)) == 1
    yield run_id
    seams.fault_backend(experiment, run_id).sweep(run_id)


def take(run_id: str, wait: str = "60s") -> dict[str, Any]:
    """The preflight step of a run of `next-run` that queues up to `wait`: its lease part."""
    lease: dict[str, Any] = json.loads(preflight(experiment_text("next-run", wait), run_id))["lease"]
    return lease


def release(run_id: str) -> None:
    assert "released" in targetlease.release(experiment_from_text(experiment_text("next-run")), run_id, "")


def test_a_planted_lease_that_is_never_renewed_is_taken_over_after_its_duration_named_not_kfchaos(
    planted_on: RealCluster, live_run: str
) -> None:
    """Another tool's Lease on the target's name, its holder never renewing, and its holder string the run id of a
    live run's objects: taken over after its 3 s, named as not kfchaos's, that run's object left alone, and the
    other tool's labels and annotations written back as they were."""
    plant(planted_on, live_run, labels={"app": "other-tool"}, annotations={"other.example/owner": "team-x"})
    taker = f"run-take-{uuid.uuid4().hex[:6]}"
    taken = take(taker)
    assert taken["status"] == "held" and taken["waited"] >= 3
    assert taken["how"].startswith(f"taken over from '{live_run}' after its lease expired (not renewed for 3s)")
    assert NOT_OURS in taken["how"] and "none of its objects were swept" in taken["how"]
    assert "took_over" not in taken  # nothing for the step to sweep
    assert len(run_objects(planted_on, live_run)) == 1
    record = read_lease(planted_on)
    assert record.holder_identity == taker
    assert record.labels == {"app": "other-tool", "app.kubernetes.io/managed-by": "kfchaos"}
    assert record.annotations == {"other.example/owner": "team-x"}
    assert record.history[-1].run_id == live_run and NOT_OURS in record.history[-1].outcome
    release(taker)


def test_a_holder_string_made_to_look_like_a_live_run_never_gets_that_runs_objects_deleted(
    planted_on: RealCluster, live_run: str
) -> None:
    """kfchaos's label copied onto the Lease and a live run's id as holder, but no kfchaos.io/holder naming it:
    the run id is no evidence that run held this target, so a takeover removes nothing of it."""
    plant(planted_on, live_run, labels={"app.kubernetes.io/managed-by": "kfchaos"},
          annotations={"kfchaos.io/holder": json.dumps({"run_id": "run-someone-else"})})  # fmt: skip
    taker = f"run-take-{uuid.uuid4().hex[:6]}"
    taken = take(taker)
    assert taken["status"] == "held" and "took_over" not in taken
    assert (
        f"{WHERE} names a holder kfchaos did not write (kfchaos.io/holder does not name '{live_run}')" in (taken["how"])
    )
    assert len(run_objects(planted_on, live_run)) == 1
    release(taker)


def at_another_target(cluster: RealCluster, name: str) -> str:
    """An experiment aimed at target B: other pods (OTHER_TARGET, a Deployment made here) in the same namespace."""
    apps = k8s.AppsV1Api(cluster.api_client())
    container = {"name": "m", "image": "example.invalid/m:1"}
    pod = {"metadata": {"labels": OTHER_TARGET}, "spec": {"containers": [container]}}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "other-model"},
            "spec": {"replicas": 1, "selector": {"matchLabels": OTHER_TARGET}, "template": pod}}  # fmt: skip
    try:
        apps.create_namespaced_deployment(TARGET_NAMESPACE, body)
    except k8s.ApiException as error:
        if error.status != 409:
            raise
    data = yaml.safe_load(experiment_text(name))
    data["spec"]["target"]["selector"] = {"labels": OTHER_TARGET}
    return yaml.safe_dump(data)


def test_kfchaoss_whole_record_copied_onto_the_lease_never_gets_a_runs_objects_at_another_target_swept(
    planted_on: RealCluster,
) -> None:
    """A Lease planted with kfchaos's whole record (its label, and kfchaos.io/holder naming run X) reads as a dead
    kfchaos holder, so it is taken over and X's objects are swept; but only those that reach this target. X alive
    at target B keeps its PodChaos there, named as not swept; its PodChaos that selects this target is removed."""
    live = f"run-live-{uuid.uuid4().hex[:6]}"
    at_b = experiment_from_text(at_another_target(planted_on, "alive-at-b"))
    at_a = experiment_from_text(experiment_text("once-at-a"))
    there = seams.fault_backend(at_b, live).apply(at_b.spec.faults[0]).name
    here = seams.fault_backend(at_a, live).apply(at_a.spec.faults[0]).name
    assert sorted(run_objects(planted_on, live)) == sorted([there, here])
    plant(planted_on, live, labels={"app.kubernetes.io/managed-by": "kfchaos"},
          annotations={"kfchaos.io/holder": json.dumps({"run_id": live, "experiment": "alive-at-b"})})  # fmt: skip
    taker = f"run-take-{uuid.uuid4().hex[:6]}"
    try:
        taken = take(taker)
        assert taken["status"] == "held" and taken["how"] == "taken over" and taken["took_over"]["run_id"] == live
        assert taken["took_over"]["swept"] == 1
        assert taken["took_over"]["not_swept"] == [f"podchaos {TARGET_NAMESPACE}/{there}: selects another target"]
        assert run_objects(planted_on, live) == [there]
        release(taker)
    finally:
        seams.fault_backend(at_b, live).sweep(live)


def test_a_lease_duration_of_a_billion_seconds_is_honoured_only_up_to_the_cap(planted_on: RealCluster) -> None:
    """A real run's Lease edited to leaseDurationSeconds 10^9 after the run died: a run with a shorter deadline gives
    up at it, INCONCLUSIVE "target busy"; one with a longer deadline takes over once the cap passed (not 31 years)."""
    dead = f"run-dead-{uuid.uuid4().hex[:6]}"
    assert json.loads(preflight(experiment_text("died"), dead))["lease"]["status"] == "held"
    edit(planted_on, {"leaseDurationSeconds": 10**9})
    late = take(f"run-late-{uuid.uuid4().hex[:6]}", "2s")
    assert late["status"] == "busy" and 2 <= late["waited"] < 30
    assert late["reason"].startswith(f"target busy: held by run {dead} of died (KFP run {dead}) since ")
    taker = f"run-take-{uuid.uuid4().hex[:6]}"
    taken = take(taker)
    assert taken["status"] == "held" and taken["how"] == "taken over" and CAP <= taken["waited"] < 45
    assert taken["took_over"]["run_id"] == dead  # a kfchaos run that held it: its objects are swept (none here)
    outcome = read_lease(planted_on).history[-1].outcome
    assert f"its leaseDurationSeconds 1000000000 is over the {CAP}s kfchaos honours" in outcome
    release(taker)


def test_a_renew_time_in_the_future_holds_the_target_no_longer_than_the_duration(
    planted_on: RealCluster, capfd: pytest.CaptureFixture[str]
) -> None:
    """A real run's Lease edited to renewTime and acquireTime in 2100: expiry is measured on the waiter's clock
    (client-go's observedTime), so it is taken over after the 3 s as any other, the time named as ahead."""
    dead = f"run-dead-{uuid.uuid4().hex[:6]}"
    assert json.loads(preflight(experiment_text("died"), dead))["lease"]["status"] == "held"
    edit(planted_on, {"renewTime": "2100-01-01T00:00:00.000000Z", "acquireTime": "2100-01-01T00:00:00.000000Z"})
    taker = f"run-take-{uuid.uuid4().hex[:6]}"
    taken = take(taker)
    assert taken["status"] == "held" and taken["how"] == "taken over" and 3 <= taken["waited"] < 45
    said = capfd.readouterr().err
    assert f"held by run {dead} of died (KFP run {dead}) since 2100-01-01 00:00:00 UTC (ahead of this host's" in said
    release(taker)


def test_another_tools_lease_that_keeps_renewing_makes_a_run_give_up_at_its_deadline_naming_it(
    planted_on: RealCluster,
) -> None:
    """A Lease that is not kfchaos's at all, held and renewed every second by its tool: a run queues up to its
    deadline and ends INCONCLUSIVE "target busy", naming the Lease as not kfchaos's; it touched nothing, and the
    other tool's Lease still names its holder and carries its labels."""
    plant(planted_on, "other-tool-leader", labels={"app": "other-tool"})
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(1.0):
            edit(planted_on, {"renewTime": micro_time(time.time())})

    renewing = threading.Thread(target=renew)
    renewing.start()
    late = f"run-late-{uuid.uuid4().hex[:6]}"
    try:
        out = json.loads(preflight(experiment_text("late", "5s"), late))
    finally:
        stop.set()
        renewing.join()
    busy = out["lease"]
    assert busy["status"] == "busy" and 5 <= busy["waited"] < 40
    assert busy["reason"].startswith(f"target busy: {NOT_OURS}: held by 'other-tool-leader' since ")
    assert "not checked" in out["backend"] and run_objects(planted_on, late) == []
    record = read_lease(planted_on)
    assert record.holder_identity == "other-tool-leader" and record.labels == {"app": "other-tool"}
    assert NOT_OURS in (record.ended(late) or record.history[-1]).outcome
