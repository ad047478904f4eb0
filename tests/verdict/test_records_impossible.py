"""Impossible records are refused (issue 11 §4, issue 13): each case below turned a true FAIL into PASS (or
crashed) through `kfchaos verdict`; now each is an input error, exit 3, naming the file, the column and the rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kfchaos.records import impossible_data
from tests.fuzz.harness import assert_contract, run_cli
from tests.verdict.builders import experiment_text, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0
N = 3000


def _replace(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _slowest(table: pa.Table, fraction: float = 0.05) -> np.ndarray:
    latency = table.column("latency").to_numpy()
    return latency >= np.quantile(latency, 1 - fraction)


def negative_latency(t: pa.Table) -> pa.Table:
    latency = t.column("latency").to_numpy().copy()
    latency[_slowest(t)] *= -1
    return _replace(t, "latency", pa.array(latency))


def nan_latency(t: pa.Table) -> pa.Table:
    latency = t.column("latency").to_numpy().copy()
    latency[_slowest(t)] = np.nan
    return _replace(t, "latency", pa.array(latency))  # NaN, not null


def null_latency(t: pa.Table) -> pa.Table:
    latency = t.column("latency").to_numpy()
    return _replace(t, "latency", pa.array(latency, mask=_slowest(t)))


def rows_twice(t: pa.Table) -> pa.Table:
    return pa.concat_tables([t, t])


def sent_before_intended(t: pa.Table) -> pa.Table:
    return _replace(t, "sent", pc_sub(t.column("intended"), 0.5))


def pc_sub(column: pa.ChunkedArray, by: float) -> pa.Array:
    return pa.array(column.to_numpy() - by)


def stage_outside_int16(t: pa.Table) -> pa.Table:
    return _replace(t, "stage", pa.array(np.full(t.num_rows, 40000), pa.int32()))


def long_context_not_bool(t: pa.Table) -> pa.Table:
    return _replace(t, "long_context", pa.array(np.zeros(t.num_rows, dtype=np.int64)))


def sent_int64_min(t: pa.Table) -> pa.Table:
    sent = t.column("sent").to_numpy().astype(np.int64)
    sent[7] = np.iinfo(np.int64).min
    return _replace(t, "sent", pa.array(sent))


def intended_far_away(t: pa.Table) -> pa.Table:
    intended = t.column("intended").to_numpy().copy()
    intended[7] += 1e12
    return _replace(t, "intended", pa.array(intended))


CASES: dict[str, tuple[Callable[[pa.Table], pa.Table], str]] = {
    "negative latency": (negative_latency, "latency: 150 row(s) negative"),
    "NaN latency on success": (nan_latency, "latency: 150 completed request(s) without a latency"),
    "null latency on success": (null_latency, "latency: 150 completed request(s) without a latency"),
    "every row twice": (rows_twice, "request_id: 3000 row(s) repeat a request id"),
    "sent before intended": (sent_before_intended, "sent: 3000 row(s) earlier than intended"),
    "stage outside int16": (stage_outside_int16, "stage: 3000 row(s) outside 0..100"),
    "long_context not bool": (long_context_not_bool, "long_context: type int64, expected bool"),
    "sent at int64 min": (sent_int64_min, "sent: 1 row(s) more than 604800 s from the first intended time"),
    "intended 1e12 s away": (intended_far_away, "intended: 1 row(s) more than 604800 s from the first intended"),
}


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    exp = tmp_path / "exp.yaml"
    exp.write_text(experiment_text("p99_drift_max: 15%", stages=[10]))
    metrics = tmp_path / "metrics.json"
    oom_snapshot(START, START + 40).write(metrics)
    return {"exp": exp, "base": baseline().write(tmp_path / "base.yaml"), "metrics": metrics}


def _verdict(inputs: dict[str, Path], table: pa.Table, name: str = "r.parquet") -> tuple[int, str]:
    path = inputs["exp"].parent / name
    pq.write_table(table, path)
    argv = ["verdict", "--experiment", str(inputs["exp"]), "--records", str(path), "--baseline", str(inputs["base"])]
    result = run_cli([*argv, "--metrics", str(inputs["metrics"])], time_s=120)
    assert_contract(result)
    return result.code, result.stderr


def test_the_untouched_slow_records_fail(inputs: dict[str, Path]) -> None:
    assert _verdict(inputs, records(10, exponential(1.5, N), start=START))[0] == 1


@pytest.mark.parametrize("case", list(CASES))
def test_impossible_records_are_an_input_error_naming_file_column_rows(inputs: dict[str, Path], case: str) -> None:
    mutate, expected = CASES[case]
    code, err = _verdict(inputs, mutate(records(10, exponential(1.5, N), start=START)), "bad.parquet")
    assert code == 3, err
    assert "bad.parquet: impossible records:" in err and expected in err, err


def test_an_end_before_the_send_is_impossible() -> None:
    table = records(10, np.full(10, 0.1), start=START)
    ended = table.column("sent").to_numpy(zero_copy_only=False) - 1.0
    problems = impossible_data(_replace(table, "ended", pa.array(ended)))
    assert problems == ["ended: 10 row(s) earlier than sent (a request ends after it starts)"]
    assert impossible_data(table) == []  # the builder's end is send + latency
