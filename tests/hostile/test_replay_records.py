"""`replay` writes its records as it takes them: a SIGKILL or a full disk at the end keeps what was measured,
marked incomplete, in `<out>.partial/`. Every wait is bounded; the test ends what it starts."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.records import unfinished_stages
from kfchaos.traffic import engine
from kfchaos.traffic.api import plan_stage, run_stage
from kfchaos.traffic.recorder import Recorder
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.verdict import load_requests
from tests.support.hostile import hostile_server, json_answer

REPLAY = """
import sys
import kfchaos.traffic.recorder as recorder
recorder.SPOOL_S = 0.3
from kfchaos.cli import main
sys.exit(main(["replay", sys.argv[1], "--target", sys.argv[2], "--duration", "60s", "--out", sys.argv[3], "--quiet"]))
"""


def _traffic(path: Path, count: int, gap: float) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "timestamp": i * gap}) + "\n" for i in range(count)))
    return path


def test_a_sigkilled_replay_keeps_what_it_measured(tmp_path: Path) -> None:
    traffic = _traffic(tmp_path / "t.jsonl", 6000, 0.01)
    out = tmp_path / "records.parquet"
    parts = Path(f"{out}.partial")
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        child = subprocess.Popen([sys.executable, "-c", REPLAY, str(traffic), server.url, str(out)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(list(parts.glob("part-*.parquet"))) < 2:
                time.sleep(0.1)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            with contextlib.suppress(OSError):
                child.kill()
            child.wait(timeout=30)
    assert not out.exists()
    files = sorted(parts.glob("part-*.parquet"))
    assert len(files) >= 2, "no records were written before the kill"
    for file in files:
        assert pq.read_schema(file).metadata[b"kfchaos.records.complete"] == b"false"
    assert len(load_requests(parts)) > 0  # the verdict reads the folder as records
    # ...and knows the stage is not whole: no part says how the replay ended.
    assert "did not finish" in unfinished_stages(parts)[100]


def test_a_whole_file_refused_at_the_end_leaves_every_record_in_parts_that_say_the_stage_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stage ran whole; only its one records file was refused (a real full disk: tests/hostile/test_full_disk.py).
    def full(table: object, path: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(engine, "write_parquet", full)
    traffic = _traffic(tmp_path / "t.jsonl", 50, 0.01)
    out = tmp_path / "records.parquet"
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        plan = plan_stage(ReplaySettings(stage=100, source=str(traffic), loop=False))
        result = run_stage(plan, server.url, out=out)
    assert result.path == out and out.is_dir() and result.summary.valid
    assert pq.read_table(out).num_rows == 50
    assert unfinished_stages(out) == {}  # the last part says the replay completed
    assert any("could not be written whole (No space left on device)" in note for note in result.summary.notes)


def test_a_whole_stage_leaves_no_parts(tmp_path: Path) -> None:
    traffic = _traffic(tmp_path / "t.jsonl", 20, 0.01)
    out = tmp_path / "records.parquet"
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        run_stage(plan_stage(ReplaySettings(stage=100, source=str(traffic), loop=False)), server.url, out=out)
    assert pq.read_table(out).num_rows == 20
    assert not Path(f"{out}.partial").exists()


def test_a_slice_of_the_recorder_is_its_rows() -> None:
    recorder = Recorder(100, 0)
    for i in range(5):
        recorder.add(f"id-{i}", bytes(16), float(i), float(i), 200, None, 0.1)
    whole, part = recorder.table(), recorder.sliced(2, 5).table()
    assert part.column("request_id").to_pylist() == ["id-2", "id-3", "id-4"]
    assert part.column("intended").to_pylist() == whole.column("intended").to_pylist()[2:]
