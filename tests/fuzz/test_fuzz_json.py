"""Fuzz the JSON readers through the real commands: run state and metrics (`verdict --run-state/--metrics`) and
audit records (`audit verify`). Inputs: valid documents with values replaced by hostile ones (wrong types, huge
or non-finite numbers, deep nesting) and raw bytes. Each case ends in a verdict (0/1/2) or an input error (3)
within the harness' bounds; an audit record never crashes into "hash mismatch"."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos import audit
from tests.conftest import ROOT
from tests.fuzz.harness import assert_contract, budget, run_cli
from tests.support.documents import document_paths
from tests.verdict.builders import experiment_text, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0

hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**400, -(2**63), 2**63, 1e308, -1e308, 0, -1, 101, 32768]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["NaN", "Infinity", "10", "", "../../etc/passwd", "sha256:", "PASS"]),
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
RAW = st.one_of(
    st.binary(max_size=64),
    st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.sampled_from([b'{"a": NaN}', b'{"a": Infinity}', b'{"a": ' + b"9" * 5000 + b"}", b"\xff", b"", b"null"]),
)


@st.composite
def mutated(draw: st.DrawFn, seed: Any) -> bytes:
    document = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(document_paths(document)))
        if not path:
            document = draw(hostile_values)
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(hostile_values)
    return json.dumps(document, allow_nan=True).encode()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fuzz-json")
    exp = folder / "exp.yaml"
    exp.write_text(experiment_text("p99_drift_max: 15%", stages=[10]))
    metrics = folder / "metrics.json"
    oom_snapshot(START, START + 40).write(metrics)
    good = folder / "good.parquet"
    pq.write_table(records(10, exponential(1.0, 500), start=START), good)
    return {"exp": exp, "base": baseline().write(folder / "base.yaml"), "metrics": metrics, "good": good}


RUN_STATE = {
    "faults_verified": {"kill-one": True},
    "stage_valid": {"10": True, "30": "send lag"},
    "faults_removed_at": 1.0,
}


def _verdict(inputs: dict[str, Path], *extra: str) -> int:
    argv = ["verdict", "--experiment", str(inputs["exp"]), "--records", str(inputs["good"])]
    result = run_cli([*argv, "--baseline", str(inputs["base"]), *extra])
    assert_contract(result)
    return result.code


@settings(max_examples=budget(15))
@given(data=st.one_of(mutated(RUN_STATE), RAW))
def test_run_state(inputs: dict[str, Path], data: bytes) -> None:
    path = inputs["exp"].parent / "state.json"
    path.write_bytes(data)
    _verdict(inputs, "--metrics", str(inputs["metrics"]), "--run-state", str(path))


@settings(max_examples=budget(10))
@given(data=RAW)
def test_metrics_raw(inputs: dict[str, Path], data: bytes) -> None:
    path = inputs["exp"].parent / "m.json"
    path.write_bytes(data)
    assert _verdict(inputs, "--metrics", str(path)) == 3


@settings(max_examples=budget(15))
@given(data=st.data())
def test_metrics_mutated(inputs: dict[str, Path], data: st.DataObject) -> None:
    seed = json.loads(inputs["metrics"].read_text())
    path = inputs["exp"].parent / "m2.json"
    path.write_bytes(data.draw(mutated(seed)))
    _verdict(inputs, "--metrics", str(path))


def _record() -> dict[str, Any]:
    from tests.kfp_glue.test_audit import _record as build

    return build()


@settings(max_examples=budget(25))
@given(data=st.data())
def test_audit_verify(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    document = json.loads(data.draw(mutated(_record())))
    if isinstance(document, dict) and data.draw(st.booleans()):  # reseal: only the types are wrong
        document["record_hash"] = audit.sha256_json({k: v for k, v in document.items() if k != "record_hash"})
    path = tmp_path_factory.mktemp("audit") / "record.json"
    path.write_text(json.dumps(document))
    result = run_cli(["audit", "verify", str(path), "--root", str(ROOT)])
    assert_contract(result, allowed=(0, 1, 3))


@settings(max_examples=budget(10))
@given(data=RAW)
def test_audit_verify_raw(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("audit") / "record.json"
    path.write_bytes(data)
    result = run_cli(["audit", "verify", str(path)])
    assert_contract(result, allowed=(3,))
