"""Issue 25 class 4 with the real replay engine: requests dropped at the concurrency limit stay in the verdict's
denominator as errors. A slow loopback server (300 ms an answer) and a limit of 10 in flight make the engine drop
most of 300 requests scheduled over 1.5 s; the old accounting took them out and judged the few sent (all fast
200s) as a clean stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.verdict import evaluate
from kfchaos.verdict.model import Status
from tests.verdict.builders import experiment

from .loopback_server import LoopbackServer

pytestmark = pytest.mark.integration


def test_requests_dropped_at_the_concurrency_limit_fail_the_error_rate(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    rows = [{"id": f"r{i}", "timestamp": 100 + i * 0.005, "path": "/slow/300"} for i in range(300)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with LoopbackServer() as server:
        settings = ReplaySettings(stage=100, source=str(path), concurrency_limit=10, timeout=10.0)
        result = run_stage(plan_stage(settings), server.url)
    summary = result.summary
    assert summary.intended == 300 and summary.dropped > 100  # at most 10 of 300 ms each in flight: most dropped
    sent_ok = summary.ok
    assert sent_ok + summary.dropped == 300  # every request sent was answered 200
    judged = evaluate(result.table, experiment("p99_max: 5s\nerror_rate_max: 1%\nmin_samples: 20", stages=[100]))
    error_rate = judged.stage(100).check("error_rate")
    assert error_rate.samples == 300 and error_rate.details["dropped"] == summary.dropped
    assert error_rate.status is Status.FAIL and judged.status is Status.FAIL
    replay = judged.stage(100).check("replay")
    assert replay.details["dropped"] == summary.dropped
    assert "dropped at the concurrency limit" not in replay.reason or "error_rate" in replay.reason
