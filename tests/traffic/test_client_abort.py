"""Client-abort-storm requests over real sockets: the client closes streams mid-generation, slow readers read slowly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kfchaos.faultspec.params import ClientAbortStormParams
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import ReplaySettings, TrafficFault

from .loopback_server import LoopbackServer

pytestmark = pytest.mark.integration


def prompts(tmp_path: Path, n: int) -> str:
    path = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "timestamp": i * 0.05, "prompt_tokens": 5, "max_tokens": 3} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def replay(tmp_path: Path, params: ClientAbortStormParams, server: LoopbackServer, timeout: float = 30.0) -> list:
    settings = ReplaySettings(
        stage=100, source=prompts(tmp_path, 3), api="openai-completions", model="m", duration=1.0, loop=False,
        traffic_faults=(TrafficFault("storm", params),), timeout=timeout,
    )  # fmt: skip
    return run_stage(plan_stage(settings), server.url).table.to_pylist()


def test_aborting_clients_close_after_k_tokens_and_are_recorded_as_designed(tmp_path: Path) -> None:
    storm = ClientAbortStormParams(requests=6, abort_after_tokens=2, max_tokens=40, start="100ms")
    with LoopbackServer(tokens=40, gap_ms=20) as server:
        rows = replay(tmp_path, storm, server)
    aborted = [r for r in rows if r["fault_request"] == "storm"]
    assert len(aborted) == 6
    # Closed after exactly 2 token chunks, long before the 40-token stream ends: not a failure of the target.
    assert all(r["error"] == "client_abort" and r["output_tokens"] == 2 for r in aborted)
    assert all(r["ttft"] > 0 and r["latency"] is None for r in aborted)
    traffic = [r for r in rows if r["fault_request"] is None]
    assert len(traffic) == 3 and all(r["error"] is None for r in traffic)


def test_aborting_after_seconds(tmp_path: Path) -> None:
    storm = ClientAbortStormParams(requests=2, abort_after="150ms", max_tokens=200)
    with LoopbackServer(tokens=200, gap_ms=20) as server:
        rows = replay(tmp_path, storm, server)
    aborted = [r for r in rows if r["fault_request"] == "storm"]
    assert [r["error"] for r in aborted] == ["client_abort"] * 2
    assert all(0 < r["output_tokens"] < 200 for r in aborted)


def test_slow_readers_read_at_their_rate_on_their_own_connections(tmp_path: Path) -> None:
    # ~24 KB of stream, several times the slow reader's small receive buffer: at 4 KB/s it takes seconds to read
    # what the server writes in ~0.3 s, less at most the one buffer-full read before the last pause.
    rate = 4096
    storm = ClientAbortStormParams(slow_readers=2, read_rate=rate, max_tokens=300)
    with LoopbackServer(tokens=300, gap_ms=1) as server:
        rows = replay(tmp_path, storm, server)
    slow = [r for r in rows if r["fault_request"] == "storm"]
    assert len(slow) == 2 and all(r["error"] is None and r["output_tokens"] == 300 for r in slow)
    assert all(r["bytes_received"] > 20_000 for r in slow)
    assert all(r["latency"] >= (r["bytes_received"] - 16_384) / rate for r in slow)  # the rate bound, not timing
    traffic = [r for r in rows if r["fault_request"] is None]
    # The traffic never shares a slow reader's connection: it reads at full speed.
    assert all(r["error"] is None for r in traffic)
    assert max(r["latency"] for r in traffic) < min(r["latency"] for r in slow)


def test_a_slow_reader_is_ended_by_the_request_timeout(tmp_path: Path) -> None:
    storm = ClientAbortStormParams(slow_readers=1, read_rate=16, max_tokens=100)
    with LoopbackServer(tokens=100, gap_ms=5) as server:
        rows = replay(tmp_path, storm, server, timeout=1.0)
    assert [r["error"] for r in rows if r["fault_request"] == "storm"] == ["timeout"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "needs requests or slow_readers"),
        ({"requests": 1, "abort_after_tokens": 3, "abort_after": "1s"}, "not both"),
        ({"requests": 1, "abort_after_tokens": 10, "max_tokens": 10}, "below max_tokens"),
        ({"requests": 1, "every": "100ms"}, "every must be at least"),
        ({"requests": 1, "abort_after": "2h"}, "abort_after must be"),
        ({"requests": 10_001}, "less than or equal"),
        ({"slow_readers": 1, "read_rate": 1}, "greater than or equal"),
    ],
)
def test_storm_params_are_bounded(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ClientAbortStormParams(**fields)
