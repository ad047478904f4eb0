"""The demo LLM server, its supervisor and the fault proxy, over real sockets on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port

MODEL = "demo/llama-3-8b-sim"


def metric(base: str, name: str) -> float:
    text = requests.get(f"{base}/metrics", timeout=5).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


def reason(base: str) -> str | None:
    """The `reason` label of kube_pod_container_status_last_terminated_reason, None when not exported."""
    text = requests.get(f"{base}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kube_pod_container_status_last_terminated_reason":
                return sample.labels["reason"]
    return None


def _start(args: list[str], tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    state = tmp / f"state-{port}.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kfchaos.demo.stack.supervisor",
            "--port",
            str(port),
            "--state",
            str(state),
            "--restart-delay",
            "0.5",
            *args,
        ],
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health")
    return process, base, state


def _stop(process: subprocess.Popen[bytes], state: Path) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)
    assert not state.exists(), "the supervisor removes its state file when it stops"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    process, base, state = _start([], tmp_path)
    yield base, state
    _stop(process, state)


def test_streaming_chat_completion_speaks_openai_sse(server: tuple[str, Path]) -> None:
    base, _ = server
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello " * 40}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with requests.post(f"{base}/v1/chat/completions", json=body, stream=True, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [line[6:] for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"]]
    assert len(content) == 12
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["usage"] == {"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72}


def test_plain_completion_and_bad_requests(server: tuple[str, Path]) -> None:
    base, _ = server
    response = requests.post(
        f"{base}/v1/completions", json={"model": MODEL, "prompt": "x" * 400, "max_tokens": 5}, timeout=30
    )
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 5
    assert requests.post(f"{base}/v1/completions", data=b"{not json", timeout=5).status_code == 400
    assert requests.post(f"{base}/v1/completions", json={"model": "other", "prompt": "x"}, timeout=5).status_code == 404


def test_metrics_carry_vllm_names(server: tuple[str, Path]) -> None:
    base, _ = server
    requests.post(f"{base}/v1/completions", json={"model": MODEL, "prompt": "y" * 100, "max_tokens": 3}, timeout=30)
    text = requests.get(f"{base}/metrics", timeout=5).text
    for name in (
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "container_oom_events_total",
    ):
        assert name in text, name
    assert metric(base, "vllm:e2e_request_latency_seconds_count") == 1


def _long_context_burst(base: str, count: int) -> list[int | str]:
    from concurrent.futures import ThreadPoolExecutor

    document = "lorem ipsum " * 5400  # ~16k tokens at 4 characters a token

    def one(i: int) -> int | str:
        body = {"model": MODEL, "prompt": f"{document}\n\nQuestion {i}?", "max_tokens": 8}
        try:
            return requests.post(f"{base}/v1/completions", json=body, timeout=30).status_code
        except requests.RequestException as exc:
            return type(exc).__name__

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


def test_unsafe_settings_are_oom_killed_and_restarted(tmp_path: Path) -> None:
    process, base, state = _start(["--max-num-seqs", "256", "--gpu-memory-utilization", "0.95"], tmp_path)
    try:
        first_pid = json.loads(state.read_text())["pid"]
        outcomes = _long_context_burst(base, 48)
        assert any(o != 200 for o in outcomes), "an OOM kill cuts requests off"
        wait_http(f"{base}/health")
        recorded = json.loads(state.read_text())
        assert recorded["oom_kills"] >= 1 and recorded["pid"] != first_pid
        # As a cluster shows it: kube-state-metrics' restart count and last reason; cAdvisor's new series at 0.
        assert metric(base, "kube_pod_container_status_restarts_total") == recorded["restarts"] >= 1
        assert reason(base) == "OOMKilled"
        assert metric(base, "kube_pod_container_status_last_terminated_exitcode") == 137
        assert metric(base, "container_oom_events_total") == 0
    finally:
        _stop(process, state)
    assert b"OOM kill" in process.stderr.read()  # type: ignore[union-attr]


def test_tuned_settings_serve_the_same_burst(tmp_path: Path) -> None:
    process, base, state = _start(
        ["--max-num-seqs", "32", "--gpu-memory-utilization", "0.85", "--enable-prefix-caching"], tmp_path
    )
    try:
        assert _long_context_burst(base, 48) == [200] * 48
        assert json.loads(state.read_text())["oom_kills"] == 0
    finally:
        _stop(process, state)


def test_killing_the_server_is_a_restart_not_an_oom(server: tuple[str, Path]) -> None:
    base, state = server
    pid = json.loads(state.read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        recorded = json.loads(state.read_text())
        if recorded["pid"] not in (None, pid):
            break
        time.sleep(0.1)
    wait_http(f"{base}/health")
    assert recorded["restarts"] == 1 and recorded["oom_kills"] == 0
    assert metric(base, "kube_pod_container_status_restarts_total") == 1
    assert reason(base) == "Error"  # a SIGKILL that is not an OOM kill: exit code 137, reason Error
    assert metric(base, "kube_pod_container_status_last_terminated_exitcode") == 137
    assert recorded["previous_log"] and Path(recorded["previous_log"]).is_file()
