"""Records survive a full disk (kfchaos.traffic.recorder.Spool), on a real filesystem of a few MiB: a tmpfs mounted
for the test with `mount -t tmpfs -o size=...` (root, as CI runs). Nothing here mocks a write: the disk refuses it.

A replay whose records fill the disk stops sending, keeps every row it took readable, marks the stage as cut by the
disk, and the verdict on it is INCONCLUSIVE saying so; nothing else on the disk is lost, and the run folder written
from those records (on another disk, as the verdict step's pod has its own) is whole.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from kfchaos.cli import main
from kfchaos.records import unfinished_stages
from kfchaos.rundir import layout
from kfchaos.steps import shards
from kfchaos.traffic import recorder
from tests.support.hostile import hostile_server, json_answer
from tests.verdict.builders import experiment_text

DISK_SIZE = "8m"
PLANNED = 12_000  # requests at 200/s over 60 s: the disk is full long before
ROOM_FOR_PARTS = 200 << 10  # what the replay's parts may fill beyond its reserve


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0700", "tmpfs", str(mount)],
                              capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        problem = (done.stderr.strip() or f"exit {done.returncode}") if done.returncode else None
    except OSError as exc:
        problem = str(exc)
    if problem:
        why = f"cannot mount a {DISK_SIZE} tmpfs to fill ({problem}): needs root (CAP_SYS_ADMIN)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30, check=False)


def _fill(disk: Path, leave: int) -> Path:
    """A file taking all but `leave` bytes of the disk."""
    stats = os.statvfs(disk)
    filler = disk / "filler.bin"
    with filler.open("wb") as handle:
        handle.truncate(0)
        os.posix_fallocate(handle.fileno(), 0, stats.f_bavail * stats.f_frsize - leave)
    return filler


def _traffic(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "timestamp": i * 0.005}) + "\n" for i in range(PLANNED)))
    return path


def _replay(traffic: Path, url: str, out: Path) -> int:
    argv = ["replay", str(traffic), "--target", url, "--duration", "60s", "--no-loop", "--quiet"]
    return main([*argv, "--out", str(out)])


def test_a_replay_that_fills_its_disk_stops_keeps_every_row_and_the_verdict_says_so(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(recorder, "SPOOL_S", 0.3)
    neighbour = small_disk / "notes.txt"
    neighbour.write_text("kept\n")
    filler = _fill(small_disk, recorder.RESERVE_BYTES + ROOM_FOR_PARTS)
    size = filler.stat().st_size
    out = small_disk / "records.parquet"
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        assert _replay(_traffic(tmp_path / "t.jsonl"), server.url, out) == 2
        sent = len(server.seen)
    printed = capsys.readouterr().out
    assert "INVALID (cut by the disk: ENOSPC (No space left on device) writing part-" in printed
    # Every row it took is readable: one per request the server saw, and the ones it never sent (cancelled).
    table = pq.read_table(out)
    assert f"records   {out} ({table.num_rows} rows)" in printed
    assert sent <= table.num_rows < PLANNED // 2, "the replay went on sending after the disk was full"
    assert pc.count_distinct(table["request_id"]).as_py() == table.num_rows
    cut = unfinished_stages(out)
    assert list(cut) == [100] and cut[100].startswith("the replay was cut: ENOSPC (No space left on device)")
    # A shard cut so: its merged stage names it (the one merged file cannot carry the cut).
    assert shards.unfinished_parts([str(out)]) == [f"shard records records.parquet: {cut[100]}"]
    # Nothing else on the disk is lost, nothing of the replay's own is left behind.
    assert neighbour.read_text() == "kept\n" and filler.stat().st_size == size
    assert not [p.name for p in small_disk.rglob(".*")], "a reserve or a temporary file was left"

    # The verdict step runs elsewhere (its own disk): INCONCLUSIVE, saying why; its run folder whole and verifiable.
    experiment = tmp_path / "e.yaml"
    experiment.write_text(experiment_text("p99_max: 2s", stages=[100], stage_duration="60s", rate=200.0))
    folder = tmp_path / "runs" / "run-1"
    argv = ["verdict", "--experiment", str(experiment), "--records", str(out), "--json", "--out", str(folder)]
    assert main(argv) == 2
    verdict = json.loads(capsys.readouterr().out)
    replay = next(c for c in verdict["stages"][0]["checks"] if c["name"] == "replay")
    assert replay["status"] == "INCONCLUSIVE" and replay["reason"].startswith("the replay was cut: ENOSPC")
    assert verdict["status"] == "INCONCLUSIVE"
    assert {layout.MANIFEST, layout.VERDICT, layout.RECORDS, layout.REPORT_HTML, layout.RUN_STATE, "seal.json"} <= {
        p.name for p in folder.iterdir()
    }
    assert pq.read_metadata(folder / layout.RECORDS).num_rows == table.num_rows
    assert main(["audit", "verify", str(folder), "--require-signed"]) == 0  # re-judged the same, from run-state.json


def test_a_replay_that_cannot_reserve_room_for_its_records_sends_nothing(
    small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(small_disk, recorder.RESERVE_BYTES // 2)
    out = small_disk / "records.parquet"
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        assert _replay(_traffic(tmp_path / "t.jsonl"), server.url, out) == 3
        assert server.seen == []
    assert "cannot reserve 4 MiB for the records (No space left on device)" in capsys.readouterr().err
    assert not out.exists() and not [p for p in small_disk.iterdir() if p.name != "filler.bin"]


def test_a_pipeline_stage_whose_disk_fills_is_judged_inconclusive_and_says_why(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pipeline's replay and collect steps (kfchaos.steps.stages), the replay task's output path on the full disk:
    # the step ends normally with its records (a folder of parts), and the stage's result names the cut.
    from kfchaos.steps import stages

    monkeypatch.setattr(recorder, "SPOOL_S", 0.3)
    _fill(small_disk, recorder.RESERVE_BYTES + ROOM_FOR_PARTS)
    text = experiment_text("p99_max: 2s", stages=[100], stage_duration="60s", rate=200.0)
    records = str(small_disk / "requests")
    with hostile_server(lambda method, path: json_answer({"ok": True})) as server:
        summary = json.loads(stages.replay(text, str(tmp_path), server.url, "run-1", 100, records))
    assert summary["valid"].startswith("cut by the disk: ENOSPC")
    assert pq.read_metadata(next(Path(records).glob("*.parquet"))).num_rows > 0
    result = json.loads(stages.collect(text, 100, json.dumps(summary), "", records)[0])
    assert result["status"] == "INCONCLUSIVE" and not result["proceed"]
    assert any(reason.startswith("replay: the replay was cut: ENOSPC") for reason in result["reasons"]), result
