"""The realistic workload against the demo server: shared system prompts really share prefix-cache blocks there."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port
from kfchaos.spec import Synthetic
from kfchaos.traffic.api import run_stage
from kfchaos.traffic.plan import plan_stage
from kfchaos.traffic.settings import ReplaySettings

MODEL = "demo/llama-3-8b-sim"
pytestmark = pytest.mark.integration


def prefix_counts(base: str) -> tuple[float, float]:
    """(queried, hit) prompt tokens from the server's vllm:prefix_cache_queries / _hits counters."""
    found = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
    for family in text_string_to_metric_families(requests.get(f"{base}/metrics", timeout=5).text):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name] += sample.value
    return found["vllm:prefix_cache_queries_total"], found["vllm:prefix_cache_hits_total"]


@pytest.fixture(params=[True, False], ids=["prefix-caching", "no-prefix-caching"])
def demo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, bool]]:
    port = free_port()
    caching = ["--enable-prefix-caching"] if request.param else []
    state = tmp_path / "state.json"
    command = [
        sys.executable,
        "-m",
        "kfchaos.demo.stack.supervisor",
        "--port",
        str(port),
        "--state",
        str(state),
        *caching,
    ]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/health")
        yield base, request.param
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)


def replay(base: str, synthetic: Synthetic) -> int:
    settings = ReplaySettings(
        stage=100, synthetic=synthetic, duration=6.0, api="openai-chat", model=MODEL, timeout=30.0, seed=4
    )
    result = run_stage(plan_stage(settings), base)
    assert result.summary.completed == result.summary.intended > 20
    return result.summary.completed


def test_system_prompts_and_conversation_history_hit_the_prefix_cache_only_with_it(demo: tuple[str, bool]) -> None:
    base, caching = demo
    lengths = {
        "prompt_tokens": {"distribution": "fixed", "mean": 200},
        "output_tokens": {"distribution": "fixed", "mean": 30},
    }
    # Two long system prompts shared by single-turn requests.
    shared = {"rate": 12, "system_prompts": {"count": 2, "tokens": {"distribution": "fixed", "mean": 800}}, **lengths}
    # Conversations without a system prompt: turn k+1 resends turn k's prompt, a second or so after it finished.
    chats = {"rate": 12, "conversations": {"turns": {"distribution": "fixed", "mean": 4, "max": 4}, "think_time": "1s"}}
    hits = []
    for workload in (shared, {**chats, **lengths}):
        before = prefix_counts(base)
        replay(base, Synthetic.model_validate(workload))
        queried, hit = (after - b for after, b in zip(prefix_counts(base), before, strict=True))
        if not caching:
            assert queried == 0 and hit == 0  # vLLM counts no prefix-cache queries with the cache off
            continue
        assert queried > 0 and hit / queried > 0.3, workload
        hits.append(hit)
        print(f"prefix-cache hits {hit:.0f} of {queried:.0f} prompt tokens ({hit / queried:.0%})")
    if not caching:
        return
    # Plain synthetic prompts (each starts with its request id, one paragraph) share nothing.
    before = prefix_counts(base)
    replay(base, Synthetic.model_validate({"rate": 12, **lengths}))
    queried, hit = (after - b for after, b in zip(prefix_counts(base), before, strict=True))
    assert queried > 0 and hit == 0
