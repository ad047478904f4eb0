"""A target replaced mid-stage, on the real control plane (issue 21 §3.2). pod-failure injects without
chaos-daemon (controllers/chaosimpl/podchaos/podfailure/impl.go patches the pod through the API server), so it
really injects here. While the stage replays, the injected pod is deleted; its ReplicaSet makes a new one, which
Chaos Mesh never injects: it selects targets only while the object has no records (controllers/common/records/
controller.go, `if records == nil`), and keeps AllInjected True on the old record. kfchaos's activity watcher
(the stage step's Poller on ChaosMeshBackend.is_active) must see the fault hitting nothing from then on, and the
verdict's coverage check must not count those seconds: fault_active INCONCLUSIVE, naming them."""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pytest
from kubernetes import client as k8s

from kfchaos.faults.activity import FaultActivity, coverage
from kfchaos.faults.backend import TargetsGone
from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.steps.stagefaults import under_faults
from kfchaos.verdict import Status
from tests.cluster.conftest import RealCluster
from tests.cluster.test_daemon_faults import on_the_cluster, release, run_pods, running, stage_experiment
from tests.cluster.test_smoke import eventually
from tests.faults.test_daemon_faults import judge
from tests.verdict.builders import records

pytestmark = pytest.mark.cluster

NAMESPACE = "replaced-target"
FAULT = {"name": "fail-one", "type": "pod-failure", "mode": "one"}


def test_a_target_replaced_mid_stage_is_seen_and_its_seconds_are_not_covered(
    real_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_pods(real_cluster, NAMESPACE, "vllm-replaced", replicas=2)
    on_the_cluster(monkeypatch, real_cluster, inject="60s", recover="60s")
    spec = stage_experiment([FAULT], NAMESPACE)
    run_id = f"rep-{uuid.uuid4().hex[:6]}"
    # A second reader of the same object, as the watcher reads it: to know when to act, not to judge.
    reader = ChaosMeshBackend(real_cluster.api_client(), experiment=spec, run_id=run_id, placement_checks=False)
    handle = reader.handle_of(spec.spec.faults[0])
    core = k8s.CoreV1Api(real_cluster.api_client())
    seen: dict[str, Any] = {}

    def gone() -> str | None:
        try:
            reader.is_active(handle)
        except TargetsGone as exc:
            return str(exc)
        return None

    def replay() -> dict[str, Any]:
        seen["start"] = time.time()
        eventually("the fault verified active on its pod", lambda: reader.is_active(handle))
        (target,) = reader.wait_injected(handle).targets  # the pod the real object's record names
        seen["victim"] = target.split("/")[1]
        core.delete_namespaced_pod(seen["victim"], NAMESPACE, grace_period_seconds=0)
        seen["deleted"] = time.time()
        eventually(
            "the ReplicaSet's replacement Running",
            lambda: (
                seen["victim"] not in running(real_cluster, NAMESPACE) and len(running(real_cluster, NAMESPACE)) == 2
            ),
        )
        seen["why"] = eventually("the fault seen hitting nothing", gone)
        seen["gone_at"] = time.time()
        # Replay on with the fault hitting nothing until the stage's watcher has looked again: the reader's
        # verdict is final (the record never changes), so its next reads show the same.
        eventually("two more reads showing it", lambda: gone() and gone())
        seen["end"] = time.time()
        return {"valid": True}

    try:
        _, detail = under_faults(spec, run_id, 10, replay)
    finally:
        release(real_cluster, NAMESPACE)

    (created,) = detail["chaos_objects"]
    assert created["injection"]["targets"] == [f"{NAMESPACE}/{seen['victim']}"]
    assert "is gone (deleted, evicted or replaced); Chaos Mesh never re-selects" in seen["why"]
    # The replacement was never injected: still the image it was made with (pod-failure swaps it for pause).
    for name, pod in running(real_cluster, NAMESPACE).items():
        assert name != seen["victim"]
        assert [c.image for c in pod.spec.containers] == ["example.invalid/vllm:1"], name

    (window,) = detail["fault_windows"]
    assert any(f"{NAMESPACE}/{seen['victim']} is gone" in e for e in window["errors"]), window["errors"]
    activity = FaultActivity.from_dict(window)
    assert activity.verified, "the watcher saw the fault active before the pod was deleted"
    # ... and never once the pod was gone: its last active observation precedes the reader's first "gone".
    assert activity.verified[-1][1] < seen["gone_at"], (activity.verified, seen)
    assert coverage(activity, (seen["gone_at"], seen["end"])).covered == 0

    # The verdict, on records spanning the replay (the planned load is not the point here: the check is).
    length = seen["end"] - seen["start"]
    table = records(10, np.full(1000, 0.05), start=seen["start"], rate=1000 / length)
    verdict = judge(spec, 10, detail, table)
    check = verdict.stage(10).check("fault_active")
    assert check.status is Status.INCONCLUSIVE and check.gating, check.reason
    assert f"{FAULT['name']} not verified active for " in check.reason, check.reason
    assert check.details["uncovered_s"] > 0, check.details
    assert verdict.stage(10).status is not Status.PASS and verdict.status is not Status.PASS
