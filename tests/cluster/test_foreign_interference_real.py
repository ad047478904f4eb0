"""Foreign interference on the real control plane (issue 37 §4): a Chaos Mesh object made by hand against the
target while a stage replays makes that stage INCONCLUSIVE, naming it and the pod it killed; the same stage
without it is not. The
run's own steps (kfchaos.steps.stages replay and collect) as kfchaos-runner under the real RBAC, the object
made by an admin and acted on by the real Chaos Mesh controller."""

from __future__ import annotations

import copy
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from kfchaos.steps import stages, targetlease
from kfchaos.steps.context import experiment_from_text
from tests.cluster.conftest import RealCluster
from tests.cluster.test_rbac_real import TARGET_LABELS, _target_pods, rbac_applied  # noqa: F401 (a fixture)
from tests.faults.experiments import BASE
from tests.manifests.test_rbac import TARGET_NAMESPACE
from tests.support.hostile import hostile_server, json_answer

pytestmark = pytest.mark.cluster

ANSWER = {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}


def experiment_text() -> str:
    """A ramp of two stages, this run's own fault in the second only: the first stage has no fault of its own."""
    data = copy.deepcopy(BASE)
    data["metadata"]["name"] = "shared-target"
    data["spec"]["traffic"] = {"synthetic": {"rate": 5}, "stage_duration": "4s", "stages": [10, 100], "warmup": "0s"}
    data["spec"]["faults"] = [{"name": "kill", "type": "pod-kill", "mode": "one", "stages": [100]}]
    return yaml.safe_dump(data)


def by_hand(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": "PodChaos",
        "metadata": {"name": name, "namespace": TARGET_NAMESPACE},
        "spec": {"action": "pod-kill", "mode": "one", "selector": {"labelSelectors": TARGET_LABELS}},
    }


def stage_10(text: str, tmp_path: Path, run_id: str, during: Any = None) -> dict[str, Any]:
    records = str(tmp_path / f"{run_id}.parquet")
    with hostile_server(lambda method, path: json_answer(ANSWER)) as server:
        timer = threading.Timer(1.5, during) if during else None
        if timer:
            timer.start()
        try:
            summary = stages.replay(text, str(tmp_path), server.url, run_id, 10, records)
        finally:  # the exit handler's part: the next run gets the target
            targetlease.release(experiment_from_text(text), run_id, "")
        if timer:
            timer.join()
    return dict(json.loads(stages.collect(text, 10, summary, "", records)[0]))


def test_a_chaos_object_made_by_hand_mid_stage_makes_that_stage_inconclusive_naming_it(
    rbac_applied: RealCluster,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _target_pods(rbac_applied)
    monkeypatch.setenv("KUBECONFIG", str(rbac_applied.runner_kubeconfig))
    text = experiment_text()
    alone = stage_10(text, tmp_path, f"run-alone-{uuid.uuid4().hex[:6]}")
    assert alone["detail"]["interference"] == {"found": [], "notes": []}
    assert not any("foreign interference" in r for r in alone["reasons"])

    custom = k8s.CustomObjectsApi(rbac_applied.api_client())
    name = f"by-hand-{uuid.uuid4().hex[:6]}"

    def make() -> None:
        custom.create_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "podchaos", by_hand(name)
        )

    try:
        shared = stage_10(text, tmp_path, f"run-shared-{uuid.uuid4().hex[:6]}", make)
    finally:
        custom.delete_namespaced_custom_object("chaos-mesh.org", "v1alpha1", TARGET_NAMESPACE, "podchaos", name)
    assert shared["status"] == "INCONCLUSIVE" and shared["proceed"] is False
    named = [r for r in shared["reasons"] if f"PodChaos {TARGET_NAMESPACE}/{name} (pod-kill), not made by kfchaos" in r]
    assert named, shared["reasons"]
    # ... and the pod its pod-kill deleted, which no fault of this run reaches.
    killed = [r for r in shared["reasons"] if f"foreign interference: target pod {TARGET_NAMESPACE}/vllm-" in r]
    assert killed and ("was deleted during this stage" in killed[0] or "is being deleted" in killed[0]), shared
