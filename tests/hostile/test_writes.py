"""Writes stay in their folder: a symlink planted in an output folder is replaced, never written through."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfchaos import safefile
from kfchaos.cli import main
from kfchaos.rundir import layout
from tests.report.sample import write_sample


def test_verdict_out_never_writes_through_a_planted_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sample = write_sample(tmp_path / "in")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "runs" / "run-7"
    out.mkdir(parents=True)
    names = (layout.VERDICT, layout.MANIFEST, layout.REPORT_HTML, layout.REPORT_MD, layout.EXPERIMENT, layout.RECORDS)
    for name in names:
        (out / name).symlink_to(victim)
    assert main([*sample.verdict_argv(), "--out", str(out)]) == 1
    assert victim.read_text() == "precious\n"
    for name in names:
        assert not (out / name).is_symlink() and (out / name).is_file(), name
    assert layout.open_run(out).verdict()["status"] == "FAIL"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")

    def fail(path: Path) -> None:
        path.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        safefile.replace_with(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_run_folder_being_written_is_refused_to_a_second_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = write_sample(tmp_path / "in")
    out = tmp_path / "runs" / "run-8"
    out.mkdir(parents=True)
    with safefile.locked(out):
        assert main([*sample.verdict_argv(), "--out", str(out)]) == 3
    assert "in use by another kfchaos process" in capsys.readouterr().err
    assert not list(out.iterdir())


def test_a_crash_report_is_never_written_through_a_planted_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import time

    from kfchaos.cli import CRASH_DIR_ENV, internal_error

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv(CRASH_DIR_ENV, str(folder))
    now = time.time()
    for second in range(-1, 10):  # the name is the time to the second and the pid: plant the next few
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now + second))
        (folder / f"kfchaos-crash-{stamp}-{os.getpid()}.txt").symlink_to(victim)
    assert internal_error(ValueError("boom")) == 4
    assert victim.read_text() == "precious\n"
    assert "internal error" in capsys.readouterr().err
