"""`replay` keeps its --duration promise whatever the input: a source that yields no request for millions of lines
(a gzip bomb of junk, ten million malformed lines) stops being read at the stage's end, and the stage says so.
Asserted on what was read, never on how long it took."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.traffic.source import DEADLINE_NOTE
from tests.support.hostile import hostile_server, json_answer

JUNK_LINES = 10_000_000


def _bomb(tmp_path: Path) -> Path:
    """One request, then ten million junk lines: 20 MB decompressed, ~20 KB on disk."""
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(json.dumps({"id": "r0", "timestamp": 0.0}).encode() + b"\n")
        block = b"x\n" * 100_000
        for _ in range(JUNK_LINES // 100_000):
            out.write(block)
        out.write(json.dumps({"id": "r1", "timestamp": 0.5}).encode() + b"\n")
    return path


def test_replay_stops_reading_a_bomb_at_the_stage_end(tmp_path: Path) -> None:
    path = _bomb(tmp_path)
    assert path.stat().st_size < 1 << 20
    with hostile_server(lambda method, target: json_answer({"ok": True})) as server:
        plan = plan_stage(ReplaySettings(stage=100, source=str(path), duration=1.0, loop=False))
        result = run_stage(plan, server.url)
    report = result.report
    assert report.out_of_time, report.describe()
    assert report.lines < JUNK_LINES, "the whole bomb was read: the stage outlived its duration"
    assert any(DEADLINE_NOTE in line for line in report.describe())
    assert not result.summary.valid and "reached its duration" in (result.summary.invalid_reason or "")
    assert result.table.num_rows >= 1  # what was sent before is kept
