"""The pipeline's inject and exit-handler steps, on the Chaos Mesh backend, against the loopback API server.

This is the seam other parts call (kfchaos.steps.seams.fault_backend -> ChaosMeshBackend.from_environment);
the steps themselves belong to the pipeline area and are used here unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.faults.chaosmesh import HOST_ENV, INJECT_TIMEOUT_ENV
from kfchaos.steps import faults as steps
from kfchaos.steps.seams import BACKEND_ENV
from tests.conftest import EXPERIMENTS
from tests.support.kubeapi import KubeApiServer


@pytest.fixture
def cluster(server: KubeApiServer, monkeypatch: pytest.MonkeyPatch) -> KubeApiServer:
    monkeypatch.setenv(BACKEND_ENV, "chaosmesh")
    monkeypatch.setenv(HOST_ENV, server.url)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return server


def test_inject_then_exit_handler_leaves_nothing(cluster: KubeApiServer, tmp_path: Path) -> None:
    text = (EXPERIMENTS / "vllm-network-delay.yaml").read_text()
    result = json.loads(steps.inject(text, "run-step"))
    assert result["status"] == "PASS", result
    (applied,) = result["detail"]["chaos_objects"]
    assert applied["kind"] == "NetworkChaos"
    assert len(applied["injection"]["targets"]) == 3
    assert any(e["verb"] == "create" and e["code"] == 201 for e in result["detail"]["events"])
    assert len(cluster.chaos_objects()) == 1
    record = json.loads(steps.cleanup(text, "run-step", str(tmp_path / "cleanup.json")))
    assert record["swept"] == 1
    assert cluster.chaos_objects() == []


def test_unverified_injection_is_inconclusive(cluster: KubeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (EXPERIMENTS / "vllm-network-delay.yaml").read_text()
    for pod in cluster.objects("pods"):  # no target pod left: Chaos Mesh selects nothing
        cluster.remove_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    cluster.add_pod("llm-serving", "other", {"app": "other"})
    monkeypatch.setenv(INJECT_TIMEOUT_ENV, "300ms")
    result = json.loads(steps.inject(text, "run-none"))
    assert result["status"] == "INCONCLUSIVE"
    assert "not verified as injected" in result["reasons"][0]
    assert "not injected after 0.3s" in result["detail"]["chaos_objects"][0]["injection"]["error"]
