"""A run folder written again (`kfchaos verdict --out DIR` into a folder an earlier run or verdict wrote, a re-judged
folder): it holds and seals this write's files only. Before, the earlier write's inputs stayed (metrics.json, the
pipeline's stages and audit record, evidence items), were read by the re-judgment and sealed as the new verdict's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos.cli import main
from tests.report.sample import SampleRun, write_full_run_folder, write_sample


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "seal.json"}


def _sealed(folder: Path) -> set[str]:
    return set(json.loads((folder / "seal.json").read_text())["files"])


def _everything(out: Path, sample: SampleRun, items: int) -> None:
    write_full_run_folder(out, sample, evidence_items=items)


def test_a_verdict_written_into_an_earlier_run_folder_seals_only_its_own_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = write_sample(tmp_path / "sample", with_control=True)
    out = tmp_path / "runs" / "run-1"
    _everything(out, sample, items=2)
    earlier = _files(out)
    assert {"metrics.json", "audit.json", "stages.json", "fault-actions.jsonl", "evidence/index.json"} <= earlier
    capsys.readouterr()
    argv = ["verdict", "--experiment", str(sample.experiment), "--records", str(sample.records),
            "--baseline", str(sample.baseline), "--out", str(out)]  # fmt: skip
    assert main(argv) in (0, 1, 2)
    now = _files(out)
    gone = {"metrics.json", "run-state.json", "stages.json", "fault-actions.jsonl", "audit.json"}
    assert not gone & now and not [name for name in now if name.startswith("evidence/")], now
    assert _sealed(out) == now, "the seal covers a file this write did not make, or misses one"
    manifest = json.loads((out / "run.json").read_text())
    assert sorted(manifest["replaced"]) == sorted([*gone, "evidence/"])
    assert "held an earlier write; removed its" in capsys.readouterr().err
    assert main(["audit", "verify", str(out)]) == 0


def test_a_folder_written_again_with_fewer_evidence_items_keeps_none_of_the_old_ones(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "sample", with_control=True)
    out = tmp_path / "runs" / "run-2"
    _everything(out, sample, items=3)
    assert len([p for p in (out / "evidence").iterdir() if p.name != "index.json"]) == 3
    _everything(out, sample, items=1)
    kept = sorted(p.name for p in (out / "evidence").iterdir())
    assert len(kept) == 2 and "index.json" in kept
    assert _sealed(out) == _files(out)
    assert "replaced" not in json.loads((out / "run.json").read_text())  # the same files, written again


def test_a_run_folder_re_judged_in_place_keeps_the_inputs_it_re_read(tmp_path: Path) -> None:
    sample = write_sample(tmp_path / "sample", with_control=True)
    out = tmp_path / "runs" / "run-3"
    assert main([*sample.verdict_argv(), "--out", str(out)]) == 1
    before = _files(out)
    assert main(["verdict", "--run", str(out), "--out", str(out)]) == 1
    assert _files(out) == before and _sealed(out) == before
    assert main(["audit", "verify", str(out)]) == 0
