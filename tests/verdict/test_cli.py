"""`kfchaos verdict`: exit codes by verdict, JSON contract, bad input named with its file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.cli import main
from tests.verdict.builders import experiment_text, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    exp = tmp_path / "exp.yaml"
    exp.write_text(experiment_text("p99_drift_max: 15%", stages=[10]))
    base = baseline().write(tmp_path / "base.yaml")
    metrics = tmp_path / "metrics.json"
    oom_snapshot(START, START + 40).write(metrics)
    good = tmp_path / "good.parquet"
    pq.write_table(records(10, exponential(1.0, 3000), start=START), good)
    slow = tmp_path / "slow.parquet"
    pq.write_table(records(10, exponential(1.5, 3000), start=START), slow)
    return {"exp": exp, "base": base, "metrics": metrics, "good": good, "slow": slow}


def verdict(inputs: dict[str, Path], records_key: str, *extra: str) -> int:
    argv = ["verdict", "--experiment", str(inputs["exp"]), "--records", str(inputs[records_key])]
    return main([*argv, "--baseline", str(inputs["base"]), *extra])


def test_exit_codes_follow_the_verdict(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert verdict(inputs, "good", "--metrics", str(inputs["metrics"])) == 0
    assert verdict(inputs, "slow", "--metrics", str(inputs["metrics"])) == 1
    assert verdict(inputs, "good") == 2  # no metrics: OOM kills unknown
    out = capsys.readouterr().out
    assert "verdict-test 1.0.0: PASS" in out and ": FAIL" in out and ": INCONCLUSIVE" in out


def test_json_is_the_contract(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert verdict(inputs, "slow", "--metrics", str(inputs["metrics"]), "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "kfchaos.Verdict" and data["status"] == "FAIL"
    stage = data["stages"][0]
    assert stage["stage"] == 10 and stage["requests"] == 3000
    drift = next(c for c in stage["checks"] if c["name"] == "p99_drift")
    assert set(drift) == {
        "name",
        "status",
        "gating",
        "value",
        "threshold",
        "interval",
        "samples",
        "unit",
        "reason",
        "details",
    }
    assert drift["status"] == "FAIL" and drift["threshold"] == 0.15 and drift["samples"] == 3000
    assert drift["interval"][0] > 0.15


def test_edited_baseline_is_refused(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    text = inputs["base"].read_text().replace("median: 4.6", "median: 9.6")
    assert text != inputs["base"].read_text()
    inputs["base"].write_text(text)
    assert verdict(inputs, "good") == 3
    assert "does not match content_hash" in capsys.readouterr().err


def test_bad_inputs_exit_3_naming_the_file(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    inputs["metrics"].write_text("{not json")
    assert verdict(inputs, "good", "--metrics", str(inputs["metrics"])) == 3
    assert "metrics.json:1: not valid JSON" in capsys.readouterr().err
    inputs["exp"].write_text(experiment_text("p99_drift_max: 15", stages=[10]))
    assert verdict(inputs, "good") == 3
    assert "exp.yaml:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["verdict", "--experiment", str(inputs["exp"])])  # --records missing: argparse exits
    assert exited.value.code == 3


def test_run_state_carries_fault_verification(inputs: dict[str, Path], tmp_path: Path) -> None:
    inputs["exp"].write_text(
        experiment_text("p99_drift_max: 15%", stages=[10], faults="[{name: kill-one, type: pod-kill, mode: one}]")
    )
    state = tmp_path / "state.json"
    metrics = ["--metrics", str(inputs["metrics"])]
    assert verdict(inputs, "good", *metrics) == 2
    # Verified injected, but no observation of it during stage 10: the stage cannot count as under the fault.
    state.write_text(json.dumps({"faults_verified": {"kill-one": True}}))
    assert verdict(inputs, "good", *metrics, "--run-state", str(state)) == 2
    seen = {"from": START - 1, "to": START + 60, "stage": 10}
    windows = [{"fault": "kill-one", "name": "kill-one-x", "kind": "PodChaos", "stages": [10], "verified": [seen],
                "watched_in": [10]}]  # fmt: skip
    state.write_text(json.dumps({"faults_verified": {"kill-one": True}, "fault_windows": windows}))
    assert verdict(inputs, "good", *metrics, "--run-state", str(state)) == 0
    state.write_text(json.dumps({"faults_verified": {"kill-one": True}, "surprise": 1}))
    assert verdict(inputs, "good", *metrics, "--run-state", str(state)) == 3


def test_stale_baseline_is_reported_not_used_silently(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    baseline(captured_at="2025-01-01T00:00:00Z").write(inputs["base"])
    assert verdict(inputs, "good", "--metrics", str(inputs["metrics"]), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert any("stale" in w for w in data["warnings"])


def test_run_state_fault_windows_judge_each_stage_on_verified_activity(
    inputs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs["exp"].write_text(
        experiment_text("p99_drift_max: 15%", stages=[10], faults="[{name: kill-one, type: pod-kill, mode: one}]")
    )
    state = tmp_path / "state.json"
    metrics = ["--metrics", str(inputs["metrics"]), "--run-state", str(state)]
    entry = {"fault": "kill-one", "watched_in": [10], "stages": [10], "applied_at": START - 2, "removed_at": None}
    whole = [{"from": START - 1, "to": START + 100, "stage": 10}]
    state.write_text(
        json.dumps({"faults_verified": {"kill-one": True}, "fault_windows": [{**entry, "verified": whole}]})
    )
    assert verdict(inputs, "good", *metrics) == 0
    half = [{"from": START - 1, "to": START + 10, "stage": 10}]
    state.write_text(
        json.dumps({"faults_verified": {"kill-one": True}, "fault_windows": [{**entry, "verified": half}]})
    )
    assert verdict(inputs, "good", *metrics) == 2
    assert "kill-one not verified active for" in capsys.readouterr().out
    bad = [{"from": START + 10, "to": START, "stage": 10}]
    state.write_text(json.dumps({"fault_windows": [{**entry, "verified": bad}]}))
    assert verdict(inputs, "good", *metrics) == 3
