"""Run state and baseline files with hostile values (issue 13): input errors (exit 3), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfchaos.verdict.runstate import RunStateError, load_run_state
from tests.conftest import ROOT
from tests.fuzz.harness import assert_contract, run_cli


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"stage_valid": [true, false]}', "stage_valid must be an object"),
        ('{"stage_valid": "yes"}', "stage_valid must be an object"),
        ('{"stage_valid": {"١٠": true}}', "keys are stage percents"),  # Arabic-Indic digits pass isdigit()
        ('{"stage_valid": {"99999999999999999999": true}}', "keys are stage percents"),
        ('{"faults_removed_at": NaN}', "NaN is not a JSON number"),
        ('{"faults_removed_at": 1e999}', "faults_removed_at must be epoch seconds"),
        ('{"faults_removed_at": ' + "9" * 400 + "}", "faults_removed_at must be epoch seconds"),
        ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
    ],
)
def test_run_state_hostile_values(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(RunStateError, match=message):
        load_run_state(path)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_baseline_show_non_finite_figure(tmp_path: Path, value: str) -> None:
    text = (ROOT / "baselines/vllm-replica-kill.yaml").read_text()
    path = tmp_path / "b.yaml"
    path.write_text(text.replace("median: 1.2\n", f"median: {value}\n", 1))
    assert path.read_text() != text
    result = run_cli(["baseline", "show", str(path)])
    assert_contract(result)
    assert result.code == 3
    assert f"{path}:25: series.latency_p99.median: Input should be a finite number" in result.stderr
