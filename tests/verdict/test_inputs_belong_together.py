"""Issue 25 class 8: the inputs of one verdict belong to one run of one experiment. A records folder holding
two runs is not concatenated and judged, a baseline captured for another experiment is not used: exit 3,
naming the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kfchaos.cli import main
from kfchaos.records import RUN_ID_KEY, SPOOL_KEY
from kfchaos.verdict.requests import RecordsError, load_requests
from tests.verdict.builders import experiment_text, records
from tests.verdict.fixtures import baseline, exponential

START = 1_000_000.0


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(experiment_text("p99_drift_max: 15%", stages=[10]))
    return path


def _write(path: Path, start: float, run_id: str | None = None, spool: str | None = None) -> Path:
    table = records(10, exponential(1.0, 400), start=start)
    if run_id is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_ID_KEY: run_id.encode()})
    if spool is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), SPOOL_KEY: spool.encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_a_folder_with_two_runs_of_the_same_stage_is_refused_naming_both_files(
    tmp_path: Path, exp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "records"
    first = _write(folder / "a.parquet", START)
    second = _write(folder / "b.parquet", START + 3600)  # the same stage replayed an hour later
    with pytest.raises(RecordsError, match="two runs") as caught:
        load_requests(folder)
    assert str(first) in str(caught.value) and str(second) in str(caught.value)
    argv = ["verdict", "--experiment", str(exp), "--records", str(folder)]
    assert main(argv) == 3
    assert "two runs" in capsys.readouterr().err


def test_a_folder_whose_files_name_different_run_ids_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    _write(folder / "a.parquet", START, run_id="run-a")
    table = records(30, exponential(1.0, 400), start=START + 600)  # another stage, another run
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_ID_KEY: b"run-b"})
    pq.write_table(table, folder / "b.parquet")
    with pytest.raises(RecordsError, match=r"2 runs: run-a .*a\.parquet.*run-b .*b\.parquet"):
        load_requests(folder)


def test_one_runs_stages_in_separate_files_are_read_together(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    _write(folder / "stage10.parquet", START, run_id="run-a")
    table = records(30, exponential(1.0, 400), start=START + 600)
    pq.write_table(
        table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_ID_KEY: b"run-a"}), folder / "s30.parquet"
    )
    requests = load_requests(folder)
    assert sorted(np.unique(requests.stage).tolist()) == [10, 30] and len(requests) == 800


def test_a_baseline_of_another_experiment_is_refused_naming_both_files(
    tmp_path: Path, exp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = baseline().model_copy(update={"experiment": "another-experiment", "content_hash": None}).sealed()
    base = other.write(tmp_path / "base.yaml")
    data = _write(tmp_path / "r.parquet", START)
    argv = ["verdict", "--experiment", str(exp), "--records", str(data), "--baseline", str(base)]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert str(base) in err and str(exp) in err and "another-experiment" in err
    # This experiment's own baseline is used.
    baseline().write(base)
    assert main(argv) in (0, 1, 2)


def test_the_parts_one_replay_spooled_are_one_run_but_two_replays_parts_are_not(tmp_path: Path) -> None:
    """A replay killed mid-stage leaves `<out>.partial/part-*.parquet`, each holding the same stage: one run (the
    same spool id). Parts of two replays of that stage copied into one folder are still two runs."""
    one = tmp_path / "one.parquet.partial"
    _write(one / "part-00001.parquet", START, spool="replay-1")
    _write(one / "part-00002.parquet", START + 10, spool="replay-1")
    assert len(load_requests(one)) == 800
    _write(one / "part-00003.parquet", START + 3600, spool="replay-2")
    with pytest.raises(RecordsError, match="two runs"):
        load_requests(one)
