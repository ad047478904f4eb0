"""Fuzz the records reader through `kfchaos verdict`: valid records with columns retyped, dropped or filled with
hostile values (negative, NaN, infinite, huge, int64 extremes, nulls), rows repeated or reordered. Each case ends
in a verdict (0/1/2) or an input error (3) within the harness' bounds -- and never PASS when the mutation made
the data impossible (issue 11 §4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import assert_contract, budget, run_cli
from tests.verdict.builders import experiment_text, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0
N = 400
NUMERIC = ("intended", "sent", "latency", "ttft", "itl_p99", "tpot", "status", "stage")
HOSTILE = [-1.0, -1e-9, np.nan, np.inf, -np.inf, 1e12, -1e12, 1e300, 0.0, 40000.0, -40000.0]
# Values that make a record impossible in this column (so the verdict must not PASS with them).
IMPOSSIBLE = {
    "latency": lambda v: not np.isfinite(v) or v < 0 or v > 1e9,
    "ttft": lambda v: (np.isfinite(v) is False and not np.isnan(v)) or v < 0 or v > 1e9,
    "intended": lambda v: not np.isfinite(v) or abs(v) > 1e9,
    "stage": lambda v: True,  # every hostile value is outside 0..100 or a different stage than planned
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fuzz-records")
    exp = folder / "exp.yaml"
    exp.write_text(experiment_text("p99_drift_max: 15%", stages=[10]))
    metrics = folder / "metrics.json"
    oom_snapshot(START, START + 40).write(metrics)
    return {"exp": exp, "base": baseline().write(folder / "base.yaml"), "metrics": metrics}


@st.composite
def mutated_table(draw: st.DrawFn) -> tuple[pa.Table, bool]:
    """A records table and whether a mutation certainly made it impossible."""
    table = records(10, exponential(1.0, N), start=START)
    impossible = False
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["value", "retype", "drop", "repeat", "shuffle", "nulls"]))
        name = draw(st.sampled_from([n for n in NUMERIC if n in table.column_names] or ["shard"]))
        index = table.schema.get_field_index(name)
        if action == "value":
            values = table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            value = draw(st.sampled_from(HOSTILE))
            rows = draw(st.lists(st.integers(0, len(values) - 1), min_size=1, max_size=5))
            values[rows] = value
            as_type = pa.float64() if name not in ("stage", "status") else pa.int64()
            if as_type == pa.int64() and not np.isfinite(value):
                continue
            clean = np.nan_to_num(values) if as_type == pa.int64() else values
            try:
                table = table.set_column(index, name, pa.array(clean.astype(as_type.to_pandas_dtype())))
            except pa.ArrowInvalid:
                continue  # the generator's own cast (e.g. NaN into a column retyped to int16 earlier), not a finding
            if name == "latency" and not np.isnan(value):
                impossible |= bool(IMPOSSIBLE["latency"](value))
            elif name == "latency":
                impossible = True  # NaN latency on a completed request
            elif name in ("intended", "stage") and IMPOSSIBLE[name](value):
                impossible = True
        elif action == "retype":
            kind = draw(st.sampled_from([pa.string(), pa.int8(), pa.bool_(), pa.float32(), pa.int64()]))
            try:
                table = table.set_column(index, name, table.column(name).cast(kind, safe=False))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        elif action == "drop":
            table = table.drop_columns([name])
        elif action == "repeat":
            count = draw(st.integers(1, table.num_rows))
            table = pa.concat_tables([table, table.slice(0, count)])
            impossible = True
        elif action == "shuffle":
            order = draw(st.permutations(range(table.num_rows)))
            table = table.take(pa.array(order))
        else:
            column = table.column(name)
            mask = np.zeros(table.num_rows, dtype=bool)
            mask[draw(st.integers(0, table.num_rows - 1))] = True
            table = table.set_column(index, name, pc.if_else(pa.array(mask), pa.scalar(None, column.type), column))
            impossible |= name in ("intended", "stage", "latency")
    return table, impossible


@settings(max_examples=budget(30))
@given(case=mutated_table())
def test_verdict_on_mutated_records(inputs: dict[str, Path], case: tuple[pa.Table, bool]) -> None:
    table, impossible = case
    path = inputs["exp"].parent / "r.parquet"
    pq.write_table(table, path)
    argv = ["verdict", "--experiment", str(inputs["exp"]), "--records", str(path), "--baseline", str(inputs["base"])]
    result = run_cli([*argv, "--metrics", str(inputs["metrics"])])
    assert_contract(result)
    if impossible:
        assert result.code != 0, f"impossible records PASSed: {result.stdout[-1500:]}"
    if result.code == 3:
        assert str(path) in result.stderr, result.stderr


@settings(max_examples=budget(10))
@given(data=st.binary(max_size=2048))
def test_verdict_on_bytes(inputs: dict[str, Path], data: bytes) -> None:
    path = inputs["exp"].parent / "raw.parquet"
    path.write_bytes(b"PAR1" + data + b"PAR1" if data[:1] == b"\x00" else data)
    argv = ["verdict", "--experiment", str(inputs["exp"]), "--records", str(path), "--baseline", str(inputs["base"])]
    result = run_cli(argv)
    assert_contract(result, allowed=(3,))
