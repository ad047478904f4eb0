"""Fixtures for the backend tests: a loopback API server with target pods, and a backend on the real client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kfchaos.faults.chaosmesh import ChaosMeshBackend
from kfchaos.faults.render import render_experiment
from kfchaos.faults.retry import RetryPolicy
from tests.faults.experiments import experiment_with
from tests.support.kubeapi import KubeApiServer, kubernetes_client

TARGET_LABELS = {"app.kubernetes.io/name": "vllm"}
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(inject_delay=0.05) as api:
        for index in range(3):
            api.add_pod("llm-serving", f"vllm-{index}", TARGET_LABELS, node=f"gpu-node-{index}", containers=["vllm"])
        yield api


def make_backend(url: str) -> ChaosMeshBackend:
    return ChaosMeshBackend(kubernetes_client(url), retry=FAST_RETRY, poll_interval=0.02, request_timeout=5)


@pytest.fixture
def backend(server: KubeApiServer) -> ChaosMeshBackend:
    return make_backend(server.url)


def manifests(run_id: str = "run-1", *faults: dict[str, Any]) -> list[dict[str, Any]]:
    faults = faults or (
        {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}},
        {"name": "kill", "type": "pod-kill"},
    )
    return render_experiment(experiment_with(*faults), run_id)
