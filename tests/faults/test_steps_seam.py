"""The stage task's fault lifecycle and the exit handler, on the Chaos Mesh backend, against the loopback API.

This is the seam other parts call (kfchaos.steps.seams.fault_backend -> ChaosMeshBackend.from_environment):
a fault is created when its first stage starts, observed through the API while the stage replays, and removed
after its last stage; what was observed (verified windows) is what the stage is judged on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kfchaos.faults.activity import FaultActivity, coverage
from kfchaos.faults.chaosmesh import HOST_ENV, INJECT_TIMEOUT_ENV
from kfchaos.steps import faults as steps
from kfchaos.steps.context import experiment_from_text
from kfchaos.steps.seams import BACKEND_ENV
from kfchaos.steps.stagefaults import under_faults
from tests.conftest import EXPERIMENTS
from tests.support.kubeapi import KubeApiServer


@pytest.fixture
def cluster(server: KubeApiServer, monkeypatch: pytest.MonkeyPatch) -> KubeApiServer:
    monkeypatch.setenv(BACKEND_ENV, "chaosmesh")
    monkeypatch.setenv(HOST_ENV, server.url)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return server


def _text(fault_extra: str = "") -> str:
    text = (EXPERIMENTS / "vllm-network-delay.yaml").read_text()
    return text.replace("      type: network-delay\n", "      type: network-delay\n" + fault_extra, 1)


def _replay(probe: list[int], cluster: KubeApiServer) -> Any:
    def run() -> dict[str, Any]:
        probe.append(len(cluster.chaos_objects()))
        return {"valid": True}

    return run


def test_a_fault_runs_only_in_its_stage_and_is_watched_while_it_replays(cluster: KubeApiServer) -> None:
    experiment = experiment_from_text(_text("      stages: [30]\n"))
    seen: list[int] = []
    _, before = under_faults(experiment, "run-mid", 10, _replay(seen, cluster))
    assert before == {
        "chaos_objects": [],
        "fault_windows": [],
        "reasons": [],
        "interference": [],
        "interference_notes": [],
    }
    assert not [path for verb, path in cluster.requests if verb == "POST"]  # nothing created before stage 30
    _, during = under_faults(experiment, "run-mid", 30, _replay(seen, cluster))
    assert seen == [0, 1]  # the object existed while stage 30 replayed, not while stage 10 did
    (created,) = during["chaos_objects"]
    assert created["kind"] == "NetworkChaos" and len(created["injection"]["targets"]) == 3
    assert any(e["verb"] == "create" and e["code"] == 201 for e in created["api_events"])
    (window,) = during["fault_windows"]
    assert window["fault"] == "serving-delay" and window["stages"] == [30]
    assert window["applied_at"] <= window["verified"][0]["from"] <= window["verified"][-1]["to"]
    assert window["removed_at"] >= window["verified"][-1]["to"]
    # The start is the records' Apply event (whole seconds), not when this task polled it verified.
    assert window["injected_at"] == created["injected_at"] and float(window["injected_at"]).is_integer()
    assert window["applied_at"] - 1 < window["injected_at"] <= created["verified_at"]
    assert cluster.chaos_objects() == []  # removed after its last stage, not at the end of the run


def test_a_fault_that_expires_is_seen_inactive_from_then_on(
    cluster: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chaos Mesh stops an object at creation + duration; the fake does the same (tests/support/kubeapi.py).
    experiment = experiment_from_text(_text("      duration: 3s\n"))
    monkeypatch.setenv(INJECT_TIMEOUT_ENV, "20s")

    def replay() -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # replay until the controller has stopped the fault
            (obj,) = cluster.chaos_objects()
            if obj["status"]["experiment"]["desiredPhase"] == "Stop":
                break
            time.sleep(0.05)
        time.sleep(0.5)  # and on, while the fault is no longer there
        return {}

    started = time.time()
    _, detail = under_faults(experiment, "run-exp", 10, replay)
    ended = time.time()
    activity = FaultActivity.from_dict(detail["fault_windows"][0])
    seen = coverage(activity, (started, ended))
    assert not seen.ok and seen.uncovered >= 0.4
    assert activity.verified and activity.verified[-1][1] < ended - 0.4


def test_unverified_injection_is_named(cluster: KubeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    experiment = experiment_from_text(_text())
    for pod in cluster.objects("pods"):  # no target pod left: Chaos Mesh selects nothing
        cluster.remove_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    cluster.add_pod("llm-serving", "other", {"app": "other"})
    monkeypatch.setenv(INJECT_TIMEOUT_ENV, "300ms")
    _, detail = under_faults(experiment, "run-none", 10, lambda: {})
    assert "not verified as injected" in detail["reasons"][0]
    assert "not injected after 0.3s" in detail["chaos_objects"][0]["injection"]["error"]
    assert detail["fault_windows"][0]["verified"] == []


def test_a_fault_left_by_a_stage_is_removed_by_the_exit_handler(cluster: KubeApiServer, tmp_path: Path) -> None:
    text = _text()  # on every stage: stage 10 creates it and leaves it for the next
    under_faults(experiment_from_text(text), "run-step", 10, lambda: {})
    assert len(cluster.chaos_objects()) == 1
    record = json.loads(steps.cleanup(text, "run-step", str(tmp_path / "cleanup.json")))
    assert record["swept"] == 1
    assert cluster.chaos_objects() == []


def test_a_target_replaced_while_the_stage_replays_leaves_the_stage_uncovered(cluster: KubeApiServer) -> None:
    """Chaos Mesh selects once and keeps AllInjected True on the record of a pod that a rollout replaced
    (controllers/common/records/controller.go); the stage's watcher sees the fault hitting nothing from then
    on, so the stage is not counted as under fault."""
    experiment = experiment_from_text(_text())
    stage = experiment.spec.traffic.stages[0]
    times: list[float] = []

    def replay() -> dict[str, Any]:
        times.append(time.time())
        cluster.remove_pod("llm-serving", "vllm-0")
        cluster.add_pod("llm-serving", "vllm-0-replacement", {"app.kubernetes.io/name": "vllm"}, containers=["vllm"])
        time.sleep(0.2)
        times.append(time.time())
        return {"valid": True}

    _, detail = under_faults(experiment, "run-replaced", stage, replay)
    (window,) = detail["fault_windows"]
    assert any("llm-serving/vllm-0 is gone" in e for e in window["errors"]), window["errors"]
    assert not coverage(FaultActivity.from_dict(window), (times[0], times[1])).ok


def test_the_local_faults_owner_is_the_process_running_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under kfp.local the task that creates a fault exits long before the fault's last stage: the owner the fault
    proxy watches is the pipeline's process (env), never the short task, and garbage in the env is not a pid."""
    import os

    from kfchaos.steps.seams import FAULT_OWNER_ENV, fault_owner_pid

    monkeypatch.setenv(FAULT_OWNER_ENV, "4242")
    assert fault_owner_pid() == 4242
    for garbage in ("", "1", "-5", "12x", "0"):
        monkeypatch.setenv(FAULT_OWNER_ENV, garbage)
        assert fault_owner_pid() == os.getpid()


def test_a_stage_makes_one_backend_and_renders_its_faults_once(
    cluster: KubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One replay step: its faults applied, watched and removed, and the target watched for interference, through one
    fault backend (one API client), and each fault rendered three times in all: by the experiment's one parse (to
    validate it: kfchaos.validate), for the step's manifests, and by the backend's apply for the object it creates.
    A second step (another parse) makes its own backend."""
    from kfchaos import validate
    from kfchaos.faults import chaosmesh, render

    made, rendered = [], []
    from_environment, render_fault = chaosmesh.ChaosMeshBackend.from_environment, render.render_fault

    def counted_backend(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return from_environment(*args, **kwargs)

    def counted_render(*args: Any, **kwargs: Any) -> Any:
        rendered.append(args[1].name)
        return render_fault(*args, **kwargs)

    monkeypatch.setattr(chaosmesh.ChaosMeshBackend, "from_environment", staticmethod(counted_backend))
    monkeypatch.setattr(render, "render_fault", counted_render)
    monkeypatch.setattr(chaosmesh, "render_fault", counted_render)
    monkeypatch.setattr(validate, "render_fault", counted_render)
    experiment = experiment_from_text(_text("      stages: [30]\n"))
    _, during = under_faults(experiment, "run-once", 30, _replay([], cluster))
    assert len(during["chaos_objects"]) == 1
    assert made == [1]
    assert rendered == ["serving-delay"] * 3  # parse, the step's manifests, the object the backend applied
    under_faults(experiment_from_text(_text("      stages: [30]\n")), "run-once", 30, _replay([], cluster))
    assert made == [1, 1]  # another step (another parse) has a backend of its own
