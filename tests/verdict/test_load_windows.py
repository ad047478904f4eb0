"""Issue 31 class 1: the load a stage claims is judged over its windows, and a stopped gate ends the ramp.

Real sources only: `kfchaos replay` against the demo server of the verdict's world (tests/verdict/world.py) or a
loopback server (tests/traffic/loopback_server.py), and `kfchaos verdict` on what they wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.traffic.loopback_server import LoopbackServer
from tests.verdict.world import World, kfchaos

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _stage(verdict: dict[str, Any], percent: int) -> dict[str, Any]:
    return next(s for s in verdict["stages"] if s["stage"] == percent)


def _check(stage: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in stage["checks"] if c["name"] == name)


def _bursty(path: Path, prompt: str = "a b c d e f g h") -> Path:
    """800 requests: 720 in the first 5 s, then 80 over the last 10 s of 20 s. Replayed at 50 %, the stage's count
    (~400) and span (20 s) are its plan's; its rate never was (~72/s, then ~4/s, against 20/s planned)."""
    times = [i * 5.0 / 720 for i in range(720)] + [10.0 + i * 10.0 / 80 for i in range(80)]
    rows = [
        {"id": f"b{i}", "timestamp": 1000.0 + t, "method": "POST", "path": "/v1/completions",
         "body": {"prompt": f"{i} {prompt}", "max_tokens": 6}}
        for i, t in enumerate(times)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_stage_sent_in_a_burst_then_idle_is_inconclusive_naming_its_windows(world: World) -> None:
    source = _bursty(world.folder / "bursty.jsonl")
    burst = world.replay(50, world.folder / "burst" / "stage-50.parquet", "--duration", "20s", "--no-loop",
                         source=str(source))  # fmt: skip
    records = world.run_folder("burst-run", {50: burst, 100: world.stages[100]})
    code, verdict = world.verdict(records, out=world.folder / "burst-report")
    stage = _stage(verdict, 50)
    load = _check(stage, "load")
    # Before: the count (~400 of 400) and the span (20 s) matched the plan, and the run PASSed.
    assert load["status"] == "INCONCLUSIVE", load
    assert "windows (10s each) were off the planned rate" in load["reason"]
    assert "window 1 delivered" in load["reason"] and "window 2 delivered" in load["reason"]
    assert load["details"]["windows"]["off"] == [0, 1]
    assert _stage(verdict, 50)["status"] == "INCONCLUSIVE"
    assert (code, verdict["status"]) == (2, "INCONCLUSIVE"), verdict["reasons"]
    # The report says it in the same words.
    report = (world.folder / "burst-report" / "report.md").read_text()
    assert "stage 50: load: the stage did not apply its planned load: 2 of its 2 windows (10s each)" in report


def _plain(path: Path, count: int, seconds: float, route: str = "/") -> Path:
    rows = [{"id": f"r{i}", "timestamp": 100.0 + i * seconds / count, "path": route} for i in range(count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


LOOPBACK = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {{name: loopback, version: 1.0.0, owner: tests}}
spec:
  target: {{namespace: serving, selector: {{labels: {{app: x}}}}, endpoint: "{endpoint}"}}
  traffic:
    synthetic: {{rate: {rate}, arrival: constant}}
    stages: [50, 100]
    stage_duration: {seconds}s
  slo: {{p99_max: 5s, error_rate_max: 2%, min_samples: 50}}
  abort:
    - {{metric: error_rate, above: 20%, window: 1s, consecutive: 2}}
  baseline: {{file: none.yaml}}
"""


def _replay(server: LoopbackServer, source: Path, stage: int, out: Path, seconds: float) -> Path:
    done = kfchaos("replay", str(source), "--target", server.url, "--stage", str(stage), "--out", str(out),
                   "--duration", f"{seconds:g}s", "--no-loop", "--quiet", "--json")  # fmt: skip
    assert done.returncode in (0, 2), done.stderr[-2000:]
    return out


def _verdict(experiment: Path, records: Path) -> tuple[int, dict[str, Any]]:
    done = kfchaos("verdict", "--experiment", str(experiment), "--records", str(records), "--json")
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_a_stage_stretched_over_twice_its_span_is_inconclusive(tmp_path: Path) -> None:
    # The plan: 10 s at 20/s (200 requests) for stage 100. The replayer sent those 200 over 20 s: half the rate.
    with LoopbackServer() as server:
        experiment = tmp_path / "loopback.yaml"
        experiment.write_text(LOOPBACK.format(endpoint=server.url, rate=20, seconds=10))
        records = tmp_path / "records"
        _replay(server, _plain(tmp_path / "slow.jsonl", 200, 20.0), 100, records / "stage-100.parquet", 20.0)
    code, verdict = _verdict(experiment, records)
    load = _check(_stage(verdict, 100), "load")
    # Before: 200 of 200 planned requests, and a span longer than planned was never checked: PASS.
    assert load["status"] == "INCONCLUSIVE", load
    assert "its sends span 19.9s, 2.0 x its planned 10s" in load["reason"]
    assert code == 2


def test_records_after_a_tripped_abort_gate_fail_the_run(tmp_path: Path) -> None:
    # Stage 50's server answered 500 to everything: its abort rule tripped and the ramp had to end there. Stage
    # 100's records (a replay that went on regardless) are not a stage the ramp ran: FAIL, never PASS.
    with LoopbackServer() as server:
        experiment = tmp_path / "loopback.yaml"
        experiment.write_text(LOOPBACK.format(endpoint=server.url, rate=200, seconds=3))  # 300, then 600
        records = tmp_path / "records"
        # At 50 % the replay keeps about half of a file's requests: 1200 in it, ~600 sent over 3 s.
        _replay(server, _plain(tmp_path / "fail.jsonl", 1200, 3.0, "/fail"), 50, records / "stage-50.parquet", 3.0)
        _replay(server, _plain(tmp_path / "ok.jsonl", 600, 3.0), 100, records / "stage-100.parquet", 3.0)
    code, verdict = _verdict(experiment, records)
    tripped = _check(_stage(verdict, 50), "abort.error_rate")
    assert tripped["status"] == "FAIL"
    ramp = _check(_stage(verdict, 100), "ramp")
    assert ramp["status"] == "FAIL" and "after stage 50%'s gate tripped the ramp" in ramp["reason"]
    assert _stage(verdict, 100)["status"] == "FAIL"
    assert (code, verdict["status"]) == (1, "FAIL")
