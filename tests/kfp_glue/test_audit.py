"""`kfchaos audit verify`: every hash recomputed; an edited record, experiment or IR is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfchaos import audit
from kfchaos.cli import main
from kfchaos.kfp.versioning import read_lock
from tests.conftest import ROOT

LOCK = read_lock(ROOT / "pipelines/versions.lock.yaml")
EXPERIMENT = (ROOT / "experiments/vllm-network-delay.yaml").read_text()
MANIFEST = {
    "apiVersion": "chaos-mesh.org/v1alpha1",
    "kind": "NetworkChaos",
    "metadata": {"name": "d", "namespace": "n"},
}


def _record(**changes: object) -> dict[str, object]:
    inject = {
        "step": "inject",
        "stage": 0,
        "status": "PASS",
        "proceed": True,
        "reasons": [],
        "detail": {"chaos_objects": [{"kind": "NetworkChaos", "name": "d", "manifest": MANIFEST, "events": []}]},
    }
    stage = {
        "step": "stage",
        "stage": 10,
        "status": "PASS",
        "proceed": True,
        "reasons": [],
        "detail": {"plan_hash": "p"},
    }
    values: dict[str, object] = {
        "run_id": "run-1",
        "pipeline": {
            "name": "vllm-network-delay",
            "version": LOCK["vllm-network-delay"].version,
            "ir_hash": LOCK["vllm-network-delay"].ir_hash,
        },
        "image": "img",
        "git_commit": "abc",
        "parameters": {"experiment": EXPERIMENT, "baseline": "", "target": ""},
        "steps": [inject, stage],
        "recovery": None,
        "verdict": {"status": "PASS", "reasons": []},
        "started_at": 1.0,
        "finished_at": 2.0,
    }
    values.update(changes)
    return audit.build_record(**values)  # type: ignore[arg-type]


def _verify(tmp_path: Path, record: dict[str, object]) -> int:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    return main(["audit", "verify", str(path), "--root", str(ROOT)])


def test_a_fresh_record_verifies_including_the_ir_hash_of_the_compiled_pipeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _record()
    assert record["experiment"] == {"sha256": audit.sha256_text(EXPERIMENT)}
    assert record["replay_plans"] == [{"stage": 10, "plan_hash": "p"}]
    assert _verify(tmp_path, record) == 0
    out = capsys.readouterr().out
    assert "ok       pipeline.ir_hash" in out and "MISMATCH" not in out


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda r: r["parameters"].update(experiment=EXPERIMENT.replace("200ms", "2ms")), "experiment.sha256"),
        (lambda r: r["chaos_objects"][0]["manifest"]["metadata"].update(namespace="other"), "chaos_objects[0]"),
        (lambda r: r["verdict"].update(status="FAIL"), "record_hash"),
    ],
)
def test_an_edited_record_fails_naming_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: object, named: str
) -> None:
    record = _record()
    edit(record)  # type: ignore[operator]
    assert _verify(tmp_path, record) == 1
    assert f"MISMATCH {named}" in capsys.readouterr().out


def test_an_ir_hash_that_is_not_the_compiled_pipelines_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = _record(pipeline={"name": "vllm-network-delay", "version": "1.0.0", "ir_hash": "sha256:" + "1" * 64})
    assert _verify(tmp_path, record) == 1
    assert "MISMATCH pipeline.ir_hash" in capsys.readouterr().out


def test_unreadable_records_are_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["audit", "verify", str(bad)]) == 3
    assert f"{bad}:1: not valid JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({"kind": "Other"}))
    assert main(["audit", "verify", str(bad)]) == 3
    assert main(["audit", "verify", str(tmp_path / "missing.json")]) == 3


def test_replay_plans_are_replanned_from_the_recorded_experiment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kfchaos.traffic.api import plan_stage
    from kfchaos.validate import parse_experiment

    synthetic = EXPERIMENT.replace(
        "    file: ../traffic/vllm-prod-sample.jsonl.gz\n", "    synthetic: {rate: 50}\n"
    ).replace("stage_duration: 20m", "stage_duration: 5s")
    experiment = parse_experiment(synthetic, "synthetic.yaml")
    with monkeypatch.context() as env:
        env.setenv("KFCHAOS_TARGET_TOKEN", "the-real-secret")
        true_hash = plan_stage(experiment, 10, base_dir=".").hash
    monkeypatch.delenv("KFCHAOS_TARGET_TOKEN", raising=False)  # verifying needs no secret
    stage = {"step": "stage", "stage": 10, "status": "PASS", "proceed": True, "reasons": [], "detail": {}}
    for recorded, expected in ((true_hash, 0), ("sha256:" + "2" * 64, 1)):
        stage["detail"] = {"plan_hash": recorded}
        record = _record(parameters={"experiment": synthetic, "baseline": ""}, steps=[stage])
        assert _verify(tmp_path, record) == expected
        out = capsys.readouterr().out
        assert ("ok       replay_plans[stage 10]" if expected == 0 else "MISMATCH replay_plans[stage 10]") in out
