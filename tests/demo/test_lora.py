"""The demo server's LoRA adapters (kfchaos.demo.server.lora): vLLM's runtime endpoints over real sockets, the engine's
GPU slots (LRU) and the stalls loads and swaps cost, vllm:lora_requests_info."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kfchaos.demo.server.engine import Engine, EngineConfig, Sequence
from kfchaos.demo.server.lora import RUNTIME_ENV, LoraConfig, LoraState, runtime_updating_allowed
from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port

MODEL = "demo/llama-3-8b-sim"


def _supervised(tmp: Path, args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kfchaos.demo.stack.supervisor",
            "--port",
            str(port),
            "--state",
            str(tmp / "s.json"),
            *args,
        ],
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health")
    return process, base


@pytest.fixture
def lora_server(tmp_path: Path) -> Iterator[str]:
    args = ["--enable-lora", "--max-loras", "1", "--lora-load-ms", "20", "--lora-swap-ms", "10"]
    process, base = _supervised(tmp_path, args, {RUNTIME_ENV: "True"})
    yield base
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)


def _load(base: str, name: str, path: str = "/adapters/x") -> requests.Response:
    return requests.post(f"{base}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path}, timeout=10)


def _complete(base: str, model: str) -> requests.Response:
    return requests.post(
        f"{base}/v1/completions", json={"model": model, "prompt": "x" * 40, "max_tokens": 2}, timeout=30
    )


def test_load_serve_unload_as_vllm_answers(lora_server: str) -> None:
    base = lora_server
    loaded = _load(base, "sql", "/adapters/sql")
    assert loaded.status_code == 200
    assert loaded.text == "Success: LoRA adapter 'sql' added successfully."
    again = _load(base, "sql")
    assert again.status_code == 400 and again.json()["error"]["type"] == "InvalidUserInput"
    empty = _load(base, "", "")
    assert empty.status_code == 400
    assert empty.json()["error"]["message"] == "Both 'lora_name' and 'lora_path' must be provided."
    models = requests.get(f"{base}/v1/models", timeout=5).json()["data"]
    assert {"id": "sql", "object": "model", "root": "/adapters/sql", "parent": MODEL} in models

    assert _complete(base, "sql").status_code == 200
    unloaded = requests.post(f"{base}/v1/unload_lora_adapter", json={"lora_name": "sql"}, timeout=10)
    assert unloaded.status_code == 200 and unloaded.text == "Success: LoRA adapter 'sql' removed successfully."
    gone = requests.post(f"{base}/v1/unload_lora_adapter", json={"lora_name": "sql"}, timeout=10)
    assert gone.status_code == 404
    assert gone.json()["error"] == {
        "message": "The lora adapter 'sql' cannot be found.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
    missing = _complete(base, "sql")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {"message": "The model `sql` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}
    }
    assert _complete(base, MODEL).status_code == 200


def test_lora_requests_info_names_the_adapters(lora_server: str) -> None:
    base = lora_server
    assert _load(base, "a").status_code == 200
    assert _complete(base, "a").status_code == 200
    text = requests.get(f"{base}/metrics", timeout=5).text
    series = [
        s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:lora_requests_info"
    ]
    assert {"max_lora": "1", "running_lora_adapters": "a", "waiting_lora_adapters": ""} in series


def test_endpoints_absent_without_the_environment_gate(tmp_path: Path) -> None:
    process, base = _supervised(tmp_path, ["--enable-lora"], {RUNTIME_ENV: "0"})
    try:
        answer = _load(base, "a")
        assert answer.status_code == 404  # the route does not exist
        assert "vllm:lora_requests_info" in requests.get(f"{base}/metrics", timeout=5).text
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)


def test_load_without_enable_lora_is_vllms_500() -> None:
    state = LoraState(LoraConfig(enabled=False))
    status, body = state.load({"lora_name": "a", "lora_path": "/x"})
    assert status == 500
    assert body["error"]["message"] == "LoRA is not enabled. Use --enable-lora to enable LoRA."


@pytest.mark.parametrize(
    ("value", "allowed"), [("True", True), ("1", True), (" true ", True), ("0", False), ("yes", False)]
)
def test_environment_gate_reads_like_vllm(value: str, allowed: bool) -> None:
    assert runtime_updating_allowed({RUNTIME_ENV: value}) is allowed
    assert runtime_updating_allowed({}) is False


# ---------------------------------------------------------------------- the engine's side


def _engine(max_loras: int, max_cpu_loras: int | None = None) -> tuple[Engine, LoraState]:
    engine = Engine(EngineConfig(decode_step_s=0.01, decode_per_seq_s=0.0))
    config = LoraConfig(enabled=True, max_loras=max_loras, max_cpu_loras=max_cpu_loras, load_s=0.5, swap_s=0.1)
    state = LoraState(config, clock=lambda: 100.0)  # time stands still: reads under way are all still owed
    engine.lora = state
    return engine, state


def _seq(request_id: str, lora: str | None, max_tokens: int = 4) -> Sequence:
    seq = Sequence(request_id, 16, max_tokens)
    seq.lora = lora
    return seq


def test_a_batch_holds_at_most_max_loras_adapters_and_the_rest_wait_in_order() -> None:
    engine, state = _engine(max_loras=1)
    for name in ("a", "b"):
        state.load({"lora_name": name, "lora_path": f"/adapters/{name}"})
    for seq in (_seq("1", "a"), _seq("2", "b"), _seq("3", None), _seq("4", "a")):
        engine.add(seq)
    engine.step()
    assert [s.request_id for s in engine.running] == ["1", "3", "4"]  # b skipped: the slot is a's
    assert [s.request_id for s in engine.waiting] == ["2"]


def test_loads_and_slot_swaps_stall_the_step_by_their_cost() -> None:
    engine, state = _engine(max_loras=1, max_cpu_loras=2)
    state.load({"lora_name": "a", "lora_path": "/a"})
    state.load({"lora_name": "b", "lora_path": "/b"})
    engine.add(_seq("1", "a", max_tokens=1))
    first = engine.step()  # two reads under way (one after the other) + a's activation
    assert first.duration_s == pytest.approx(0.01 + 16 / 80_000 + 2 * 0.5 + 0.1)
    state.busy_until = 0.0  # the reads are done
    engine.add(_seq("2", "b", max_tokens=1))
    second = engine.step()  # b is in the CPU cache: a slot swap only (a leaves the slot)
    assert second.duration_s == pytest.approx(0.01 + 16 / 80_000 + 0.1)
    assert list(state.gpu) == ["b"]
    engine.add(_seq("3", "b", max_tokens=1))
    third = engine.step()
    assert third.duration_s == pytest.approx(0.01 + 16 / 80_000)  # b already in its slot: free
    assert (state.loads, state.swaps) == (2, 2)


def test_an_adapter_pushed_out_of_the_cpu_cache_is_read_again() -> None:
    engine, state = _engine(max_loras=1, max_cpu_loras=1)
    state.load({"lora_name": "a", "lora_path": "/a"})
    state.load({"lora_name": "b", "lora_path": "/b"})  # a leaves the CPU cache (LRU, capacity 1)
    assert list(state.cpu) == ["b"]
    state.busy_until = 0.0  # the two reads are done
    engine.add(_seq("1", "a", max_tokens=1))
    step = engine.step()
    assert step.duration_s == pytest.approx(0.01 + 16 / 80_000 + 0.5 + 0.1)
    assert state.loads == 3


def test_max_cpu_loras_below_max_loras_is_refused_as_vllm_does() -> None:
    with pytest.raises(ValueError, match="max-cpu-loras"):
        LoraConfig(enabled=True, max_loras=4, max_cpu_loras=2)


def test_reads_on_an_idle_engine_keep_no_later_step_waiting() -> None:
    now = [0.0]
    state = LoraState(LoraConfig(enabled=True, load_s=0.5), clock=lambda: now[0])
    state.load({"lora_name": "a", "lora_path": "/a"})
    assert state.step_stall([]) == pytest.approx(0.5)  # a step right now waits for the read
    now[0] = 2.0
    assert state.step_stall([]) == 0.0


def test_lora_requests_info_shows_the_adapter_that_waits_for_a_slot() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from kfchaos.demo.server.lora import MAX_INFO_SERIES, LoraMetrics

    engine, state = _engine(max_loras=1)
    for name in ("a", "b"):
        state.load({"lora_name": name, "lora_path": f"/{name}"})
    engine.add(_seq("1", "a"))
    engine.add(_seq("2", "b"))
    engine.step()
    registry = CollectorRegistry()
    metrics = LoraMetrics(registry, state.config)
    metrics.update((s.lora for s in engine.running), (s.lora for s in engine.waiting))
    text = generate_latest(registry).decode()
    assert 'vllm:lora_requests_info{max_lora="1",running_lora_adapters="a",waiting_lora_adapters="b"}' in text
    for i in range(MAX_INFO_SERIES + 5):  # label sets are bounded (vLLM keeps them all)
        metrics.update([f"x{i}"], [])
    assert text.count("vllm:lora_requests_info{") == 1
    assert generate_latest(registry).decode().count("vllm:lora_requests_info{") <= MAX_INFO_SERIES


def test_a_request_naming_an_adapter_still_loading_gets_404(tmp_path: Path) -> None:
    import threading

    args = ["--enable-lora", "--lora-load-ms", "3000"]
    process, base = _supervised(tmp_path, args, {RUNTIME_ENV: "1"})
    try:
        answers: list[int] = []
        loader = threading.Thread(target=lambda: answers.append(_load(base, "slow").status_code))
        loader.start()
        during = []
        while loader.is_alive():
            during.append(_complete(base, "slow").status_code)
        loader.join()
        assert answers == [200]
        # vLLM serves the name only once add_lora returned: requests naming it are refused (fast) all through the
        # 3 s read, instead of waiting in the stalled engine and succeeding
        assert during.count(404) > 10
        assert _complete(base, "slow").status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
