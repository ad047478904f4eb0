"""A client abort storm against the demo server over real sockets: aborted requests free their KV blocks, and
the abort_recovery check FAILs a build that leaks them (the test-only --leak-aborted-blocks flag)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port
from kfchaos.faultspec.params import ClientAbortStormParams
from kfchaos.metrics import names
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import ReplaySettings, TrafficFault
from kfchaos.verdict.abortstorm import abort_recovery_check
from kfchaos.verdict.model import Status
from kfchaos.verdict.requests import from_table

pytestmark = pytest.mark.integration
MODEL = "demo/llama-3-8b-sim"
SERIES = {"vllm:kv_cache_usage_perc": names.KV_CACHE_FLOOR, "vllm:num_requests_running": names.REQUESTS_RUNNING}


def scrape(base: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(requests.get(f"{base}/metrics", timeout=5).text):
        for sample in family.samples:
            reason = sample.labels.get("finished_reason")
            key = sample.name + (f"{{{reason}}}" if reason else "")
            out[key] = out.get(key, 0.0) + sample.value
    return out


@pytest.fixture(params=[False, True], ids=["frees", "leaks"])
def demo(request: pytest.FixtureRequest) -> Iterator[tuple[str, bool]]:
    port = free_port()
    flags = ["--leak-aborted-blocks"] if request.param else []
    process = subprocess.Popen([sys.executable, "-m", "kfchaos.demo.server.api", "--port", str(port), *flags])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/health", 30, process)
        yield base, request.param
    finally:
        process.terminate()
        process.wait(10)


class Sampler(threading.Thread):
    """Scrapes the two gauges every `interval` seconds, as Prometheus would, until stopped."""

    def __init__(self, base: str, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.base, self.interval = base, interval
        self.points: dict[str, list[tuple[float, float]]] = {name: [] for name in SERIES.values()}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            values = scrape(self.base)
            now = time.time()
            for metric, name in SERIES.items():
                self.points[name].append((now, values[metric]))
            self.stopped.wait(self.interval)

    def snapshot(self) -> MetricsSnapshot:
        series = {
            name: Series(name, np.array([t for t, _ in pts]), np.array([v for _, v in pts]))
            for name, pts in self.points.items()
        }
        return MetricsSnapshot(source="demo", series=series, grace=self.interval)


def test_aborted_requests_free_their_blocks_and_a_leak_fails_the_check(demo: tuple[str, bool], tmp_path: Path) -> None:
    base, leaks = demo
    source = tmp_path / "prompts.jsonl"
    source.write_text(
        "".join(json.dumps({"id": f"p{i}", "timestamp": i * 0.1, "prompt_tokens": 50, "max_tokens": 8}) + "\n"
                for i in range(10))
    )  # fmt: skip
    storm = ClientAbortStormParams(requests=20, abort_after_tokens=3, prompt_tokens=400, max_tokens=200, start="500ms")
    settings = ReplaySettings(
        stage=100, source=str(source), api="openai-completions", model=MODEL, duration=2.0, loop=False,
        traffic_faults=(TrafficFault("storm", storm),), timeout=20.0,
    )  # fmt: skip
    sampler = Sampler(base)
    sampler.start()
    try:
        time.sleep(0.5)  # samples before the stage
        result = run_stage(plan_stage(settings), base)
        time.sleep(1.5)  # and after the storm settled
    finally:
        sampler.stopped.set()
        sampler.join(10)
    rows = result.table.to_pylist()
    aborted = [r for r in rows if r["fault_request"] == "storm"]
    assert len(aborted) == 20 and all(r["error"] == "client_abort" for r in aborted)
    after = scrape(base)
    # The server noticed every disconnect and aborted the request: none runs on. As vLLM 0.32, it counts a client's
    # abort under no finished_reason (tests/engine/test_faults.py measures the real engine's +0).
    assert after["vllm:request_success_total{abort}"] == 0
    assert after["vllm:num_requests_running"] == 0
    requests_ = from_table(result.table)
    check = abort_recovery_check(requests_.where(requests_.injected), sampler.snapshot(), settle=0.5)
    if leaks:
        # 20 x ceil(401/16) blocks never came back: the floor after the storm is above the one before.
        assert after["vllm:kv_cache_usage_perc"] > 0.02
        assert check.status is Status.FAIL, check.reason
        assert "KV-cache usage did not return" in check.reason
    else:
        assert after["vllm:kv_cache_usage_perc"] == 0
        assert check.status is Status.PASS, check.reason


def test_a_slow_reader_does_not_hold_its_sequence(tmp_path: Path) -> None:
    """vLLM's engine never waits for the client (RequestOutputCollector merges outputs): the sequence finishes
    and frees its blocks while the client is still reading."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "kfchaos.demo.server.api", "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/health", 30, process)
        source = tmp_path / "none.jsonl"
        source.write_text(json.dumps({"id": "p0", "timestamp": 0, "prompt_tokens": 5, "max_tokens": 2}) + "\n")
        storm = ClientAbortStormParams(slow_readers=2, read_rate=16, max_tokens=100)
        settings = ReplaySettings(
            stage=100, source=str(source), api="openai-completions", model=MODEL, duration=1.0, loop=False,
            traffic_faults=(TrafficFault("slow", storm),), timeout=10.0,
        )  # fmt: skip
        done: list[object] = []
        replay = threading.Thread(target=lambda: done.append(run_stage(plan_stage(settings), base)))
        replay.start()
        finished = 0.0
        while replay.is_alive() and finished < 3:  # 1 traffic request + 2 slow readers finished in the engine
            time.sleep(0.1)
            finished = scrape(base)["vllm:request_success_total{length}"]
        assert finished == 3 and replay.is_alive()  # the engine finished them, the clients are still reading
        assert scrape(base)["vllm:kv_cache_usage_perc"] == 0
        replay.join(30)
    finally:
        process.terminate()
        process.wait(10)
    rows = done[0].table.to_pylist()  # type: ignore[attr-defined]
    assert [r["error"] for r in rows if r["fault_request"] == "slow"] == ["timeout", "timeout"]
