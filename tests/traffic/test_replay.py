"""The replay engine against real HTTP servers on 127.0.0.1 that the tests start themselves."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.records import REQUEST_SCHEMA
from kfchaos.targetauth import credential_from_env
from kfchaos.traffic.api import merge_shards, plan_stage, run_stage
from kfchaos.traffic.engine import new_event_loop, replay
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.traffic.tagging import HeaderPolicy

from .loopback_server import LoopbackServer

pytestmark = pytest.mark.integration


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


def write_traffic(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def evenly(n: int, gap: float, path: str = "/ok", **extra: object) -> list[dict]:
    return [{"id": f"r{i}", "timestamp": 100 + i * gap, "path": path, **extra} for i in range(n)]


def test_requests_arrive_at_their_recorded_times(server: LoopbackServer, tmp_path: Path) -> None:
    source = write_traffic(tmp_path, evenly(40, 0.02))
    result = run_stage(plan_stage(ReplaySettings(stage=100, source=source)), server.url)
    assert result.summary.ok == 40 and result.summary.valid
    arrivals = sorted(seen.at for seen in server.seen)
    # Generous tolerances for a shared machine (precision is measured in the benchmark): most requests
    # within 15 ms of their recorded offset, none off by more than 250 ms. Sending all at once, or one
    # after another's response, fails this.
    errors = [abs((at - arrivals[0]) - i * 0.02) for i, at in enumerate(arrivals)]
    assert sum(e < 0.015 for e in errors) >= 0.9 * len(errors), errors
    assert max(errors) < 0.25, errors
    table = result.table
    intended = table.column("intended").to_pylist()
    assert [b - intended[0] for b in intended] == pytest.approx([i * 0.02 for i in range(40)], abs=1e-6)


def test_slow_responses_do_not_delay_later_sends(server: LoopbackServer, tmp_path: Path) -> None:
    source = write_traffic(tmp_path, evenly(20, 0.01, "/slow/400"))
    result = run_stage(plan_stage(ReplaySettings(stage=100, source=source)), server.url)
    arrivals = sorted(seen.at for seen in server.seen)
    assert arrivals[-1] - arrivals[0] < 2.0  # open loop: 20 x 10 ms (0.19 s), not 20 x 400 ms (8 s)
    latency = result.table.column("latency").to_pylist()
    assert min(latency) >= 0.39
    assert result.summary.ok == 20


def test_concurrency_limit_drops_and_counts(server: LoopbackServer, tmp_path: Path) -> None:
    source = write_traffic(tmp_path, evenly(20, 0.01, "/slow/500"))
    result = run_stage(plan_stage(ReplaySettings(stage=100, source=source, concurrency_limit=5)), server.url)
    assert result.summary.dropped == 15 and result.summary.sent == 5
    dropped = [r for r in result.table.to_pylist() if r["error"] == "dropped"]
    assert len(dropped) == 15 and all(r["sent"] is None and r["latency"] is None for r in dropped)
    assert len(server.seen) == 5


def test_error_kinds_failing_closing_and_timing_out(server: LoopbackServer, tmp_path: Path) -> None:
    rows = [
        *evenly(4, 0.02, "/fail"),
        {"id": "closed", "timestamp": 100.1, "path": "/drop"},
        {"id": "slow", "timestamp": 100.12, "path": "/slow/3000"},
        {"id": "fine", "timestamp": 100.14, "path": "/ok"},
        {"id": "absent", "timestamp": 100.16, "path": "/missing"},
    ]
    result = run_stage(
        plan_stage(ReplaySettings(stage=100, source=write_traffic(tmp_path, rows), timeout=0.3)), server.url
    )
    by_id = {r["request_id"]: r for r in result.table.to_pylist()}
    assert by_id["r0"]["status"] == 500 and by_id["r0"]["error"] == "http" and by_id["r0"]["latency"] is not None
    assert by_id["closed"]["error"] == "connect" and by_id["closed"]["status"] is None
    assert by_id["slow"]["error"] == "timeout" and by_id["slow"]["latency"] is None
    assert by_id["fine"]["error"] is None and by_id["fine"]["status"] == 200
    assert result.summary.errors == {"http": 4, "connect": 1, "timeout": 1}
    assert by_id["absent"]["status"] == 404 and by_id["absent"]["error"] is None  # not a replay error...
    assert result.summary.ok == 1 and result.summary.status["4xx"] == 1  # ...but not a success either


def test_connection_refused_is_a_connect_error(tmp_path: Path) -> None:
    with LoopbackServer() as closed:
        url = closed.url
    result = run_stage(plan_stage(ReplaySettings(stage=100, source=write_traffic(tmp_path, evenly(3, 0.01)))), url)
    assert result.summary.errors == {"connect": 3}


def test_tags_and_credential_rules(server: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    headers = {"Authorization": "Bearer recorded-secret", "Cookie": "s=1", "X-Keep": "1", "X-Drop": "2"}
    source = write_traffic(tmp_path, evenly(10, 0.005, headers=headers))
    token = credential_from_env("TARGET_TOKEN", "bearer", "Authorization", {"TARGET_TOKEN": "live-secret"})
    policy = HeaderPolicy(add=(("X-Env", "chaos"),), strip=frozenset({"x-drop"}), credential=token)
    result = run_stage(plan_stage(ReplaySettings(stage=30, source=source, headers=policy)), server.url)
    seen = server.seen
    assert seen, "nothing arrived"
    for request in seen:
        assert request.headers["x-traffic-stage"] == "stage-30"
        assert request.headers["authorization"] == "Bearer live-secret"  # the target's, not the recording's
        assert "cookie" not in request.headers and "x-drop" not in request.headers
        assert request.headers["x-keep"] == "1" and request.headers["x-env"] == "chaos"
        version, trace, span, flags = request.headers["traceparent"].split("-")
        assert (version, flags, len(span)) == ("00", "01", 16)
        assert trace == request.headers["x-trace-id"] and len(trace) == 32
    traces = [r.headers["x-trace-id"] for r in seen]
    assert len(set(traces)) == len(traces)
    assert set(traces) == set(result.table.column("trace_id").to_pylist())
    assert "live-secret" not in repr(policy) and "live-secret" not in json.dumps(result.summary.to_dict())


def test_recorded_credentials_kept_only_when_allowed(server: LoopbackServer, tmp_path: Path) -> None:
    source = write_traffic(tmp_path, evenly(3, 0.005, headers={"Cookie": "s=1"}))
    kept = HeaderPolicy(allow_credentials=frozenset({"Cookie"}))
    run_stage(plan_stage(ReplaySettings(stage=100, source=source, headers=kept)), server.url)
    assert all(r.headers.get("cookie") == "s=1" for r in server.seen)


def test_records_match_the_schema_and_shards_merge(server: LoopbackServer, tmp_path: Path) -> None:
    source = write_traffic(tmp_path, evenly(200, 0.002))
    paths = []
    for shard in range(3):
        plan = plan_stage(ReplaySettings(stage=60, source=source, seed=9, shard=shard, shards=3))
        out = tmp_path / f"shard{shard}.parquet"
        run_stage(plan, server.url, out=out)
        assert pq.read_schema(out).equals(REQUEST_SCHEMA, check_metadata=True)
        paths.append(out)
    whole = sum(1 for _ in plan_stage(ReplaySettings(stage=60, source=source, seed=9)).schedule())
    merged = merge_shards(paths, ReplaySettings(stage=60, source=source, seed=9))
    assert merged.intended == whole and merged.ok == whole and merged.shards == [0, 1, 2]
    ids = [r for p in paths for r in pq.read_table(p).column("request_id").to_pylist()]
    assert len(ids) == len(set(ids)) == whole
    table = pq.read_table(paths[0]).to_pylist()
    for row in table:
        assert row["latency_intended"] == pytest.approx(row["latency"] + row["sent"] - row["intended"], abs=1e-6)


def test_stage_is_invalid_when_lag_exceeds_the_threshold(server: LoopbackServer, tmp_path: Path) -> None:
    source = write_traffic(tmp_path, evenly(20, 0.002))
    result = run_stage(plan_stage(ReplaySettings(stage=100, source=source, max_send_lag_p99=1e-9)), server.url)
    assert not result.summary.valid and "send lag p99" in (result.summary.invalid_reason or "")


def test_a_request_on_a_keep_alive_connection_the_server_closed_is_sent_again(tmp_path: Path) -> None:
    with LoopbackServer(drop_reused=True) as server:
        source = write_traffic(tmp_path, evenly(10, 0.02))
        result = run_stage(plan_stage(ReplaySettings(stage=100, source=source)), server.url)
        arrivals = len(server.seen)
    assert result.summary.ok == 10 and result.summary.errors == {}
    assert arrivals == 19  # each reused connection lost one attempt; the retry went on a fresh one


def test_the_replayers_own_stalls_are_measured_and_said(server: LoopbackServer, tmp_path: Path) -> None:
    """A stall of the replayer's event loop (here a blocking sleep on it, as a process starved of CPU is) delays
    what the records time, and the summary's client_stall says by how much; an unstalled replay says next to none."""
    source = write_traffic(tmp_path, evenly(20, 0.05, "/slow/100"))

    def run(stall_s: float) -> dict[str, float]:
        async def stage() -> dict[str, float]:
            if stall_s:
                asyncio.get_running_loop().call_later(0.3, time.sleep, stall_s)
            result = await replay(plan_stage(ReplaySettings(stage=100, source=source)), server.url)
            assert result.summary.ok == 20 and result.summary.client_stall is not None
            return result.summary.client_stall

        loop = new_event_loop()
        try:
            return loop.run_until_complete(stage())
        finally:
            loop.close()

    stalled = run(0.4)
    assert stalled["max"] >= 0.39 and stalled["total"] >= 0.39 and stalled["count"] >= 1, stalled
    assert run(0.0)["max"] < 0.39  # on a busy machine a quiet run stalls too, but not by a blocked 0.4 s
