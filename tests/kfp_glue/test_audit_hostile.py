"""`kfchaos audit verify` on wrongly typed fields (issue 13): an input error naming the field (exit 3), never a
traceback and never "hash mismatch" (exit 1). The record is resealed after each edit, so only the type is wrong."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kfchaos import audit
from tests.conftest import ROOT
from tests.fuzz.harness import assert_contract, run_cli
from tests.kfp_glue.test_audit import _record

# (path in the record, hostile value, the field the error must name)
CASES: list[tuple[tuple[Any, ...], Any, str]] = [
    (("parameters",), [], "parameters: expected an object, got a list"),
    (("parameters", "experiment"), 7, "parameters.experiment: expected a string, got int"),
    (("parameters", "baseline"), None, "parameters.baseline: expected a string"),
    (("experiment",), "x", "experiment: expected an object, got a string"),
    (("experiment", "sha256"), 5, "experiment.sha256: expected a string"),
    (("baseline",), [], "baseline: expected an object"),
    (("baseline", "sha256"), {}, "baseline.sha256: expected a string or null"),
    (("pipeline",), "p", "pipeline: expected an object"),
    (("pipeline", "name"), ["a"], "pipeline.name: expected a string"),
    (("pipeline", "name"), "../../etc", "pipeline.name: not a plain name"),
    (("pipeline", "version"), 1.0, "pipeline.version: expected a string, got float"),
    (("chaos_objects",), {}, "chaos_objects: expected a list, got an object"),
    (("chaos_objects", 0), "obj", "chaos_objects[0]: expected an object"),
    (("chaos_objects", 0, "manifest"), [], "chaos_objects[0].manifest: expected an object"),
    (("chaos_objects", 0, "manifest_sha256"), 3, "chaos_objects[0].manifest_sha256: expected a string"),
    (("replay_plans",), "all", "replay_plans: expected a list"),
    (("replay_plans", 0), 10, "replay_plans[0]: expected an object"),
    (("replay_plans", 0, "stage"), "10", "replay_plans[0].stage: expected a stage percent"),
    (("replay_plans", 0, "stage"), 10**30, "replay_plans[0].stage: 1000000000000000000000000000000 is not"),
    (("replay_plans", 0, "stage"), True, "replay_plans[0].stage: expected a stage percent, got bool"),
    (("run",), 1, "run: expected an object, got int"),
    (("record_hash",), 1, "record_hash: expected a string"),
]


def _set(record: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    record = copy.deepcopy(record)
    parent: Any = record
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    body = {k: v for k, v in record.items() if k != "record_hash"}
    if path != ("record_hash",):
        record["record_hash"] = audit.sha256_json(body)
    return record


@pytest.mark.parametrize(("path", "value", "message"), CASES, ids=[c[2].split(":")[0] for c in CASES])
def test_wrongly_typed_field_is_an_input_error(tmp_path: Path, path: tuple[Any, ...], value: Any, message: str) -> None:
    file = tmp_path / "record.json"
    file.write_text(json.dumps(_set(_record(), path, value)))
    result = run_cli(["audit", "verify", str(file), "--root", str(ROOT)], time_s=60)
    assert_contract(result)
    assert result.code == 3, result.stdout + result.stderr
    assert f"{file}: {message}" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"kind": ' + "9" * 5000 + "}", "audit record: Exceeds the limit"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_hostile_json_is_an_input_error(tmp_path: Path, text: str | bytes, message: str) -> None:
    file = tmp_path / "record.json"
    file.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = run_cli(["audit", "verify", str(file)], time_s=60)
    assert_contract(result)
    assert result.code == 3 and message in result.stderr, result.stderr
