"""What `kfchaos history` reads besides pipeline runs: a folder `kfchaos verdict --out` wrote (no pipeline: the
version is the experiment's metadata.version, and says so), an experiment given by its file, and input it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.cli import main
from tests.report.sample import write_sample


def test_a_verdict_out_folder_counts_under_its_experiments_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = write_sample(tmp_path / "inputs")
    assert main([*sample.verdict_argv(), "--out", str(tmp_path / "runs" / "by-hand")]) == 1  # the sample FAILs
    capsys.readouterr()
    assert main(["history", str(sample.experiment), "--runs", str(tmp_path / "runs"), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert (run["run_id"], run["verified"], run["status"]) == ("by-hand", True, "FAIL")
    assert (run["pipeline_version"], run["version_from"]) == ("1.0.0", "experiment metadata.version")
    assert run["oom_kills"] == 1.0  # one kill, seen by every stage's window: counted once


def test_a_missing_runs_folder_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "verdict-test", "--runs", str(tmp_path / "nowhere")]) == 3
    assert f"{tmp_path / 'nowhere'}: no such runs folder" in capsys.readouterr().err
