"""The pure steps: gates stop on anything but a clear pass, skips are recorded, the overall verdict never passes
on missing data."""

from __future__ import annotations

import json

from kfchaos.steps import gates
from kfchaos.steps.conclude import overall
from kfchaos.steps.results import StepResult, load_history


def _result(step: str, stage: int, status: str, proceed: bool, *reasons: str) -> StepResult:
    return StepResult(step, stage, status, proceed, list(reasons))  # type: ignore[arg-type]


def test_gate_continues_only_when_the_step_may_proceed_and_appends_to_the_history() -> None:
    history = "[]"
    decision, history = gates.gate(0, _result("steady_state", 0, "PASS", True).to_json(), history)
    assert decision == "continue"
    decision, history = gates.gate(10, _result("stage", 10, "FAIL", False, "p99 above").to_json(), history)
    assert decision == "stop"
    decision, history = gates.gate(30, gates.skipped(30, "an earlier gate stopped the ramp"), history)
    assert decision == "stop"
    assert [(r.step, r.stage, r.status) for r in load_history(history)] == [
        ("steady_state", 0, "PASS"),
        ("stage", 10, "FAIL"),
        ("stage", 30, "SKIPPED"),
    ]


def test_overall_is_the_worst_step_and_skips_are_inconclusive() -> None:
    passed = [_result("steady_state", 0, "PASS", True), _result("inject", 0, "PASS", True)]
    stages = [_result("stage", 10, "PASS", True), _result("stage", 30, "PASS", True)]
    assert overall(passed + stages, None) == ("PASS", [])
    failed = [*passed, _result("stage", 10, "FAIL", False, "p99 above"), json_skip(30)]
    status, reasons = overall(failed, None)
    assert status == "FAIL" and "stage 10%: p99 above" in reasons
    status, reasons = overall([*passed, _result("stage", 10, "PASS", False, "gate"), json_skip(30)], None)
    assert status == "INCONCLUSIVE" and any("stage 30% skipped" in r for r in reasons)


def test_no_steady_state_means_inconclusive_not_fail_and_no_stage_never_passes() -> None:
    status, reasons = overall([_result("steady_state", 0, "FAIL", False, "p99 drift"), json_skip(0)], None)
    assert status == "INCONCLUSIVE"
    assert "no stage ran: nothing was measured under faults" in reasons
    assert overall([], None)[0] == "INCONCLUSIVE"


def test_a_failed_recovery_fails_the_run() -> None:
    ok = [_result("steady_state", 0, "PASS", True), _result("stage", 10, "PASS", True)]
    recovery = {"recovery": {"status": "FAIL", "reason": "SLOs did not hold again"}}
    assert overall(ok, recovery) == ("FAIL", ["recovery: SLOs did not hold again"])


def test_a_fault_left_never_injected_is_inconclusive_and_named_with_its_release() -> None:
    ok = [_result("steady_state", 0, "PASS", True), _result("stage", 10, "PASS", True)]
    left = {"objects": ["networkchaos ns/d"], "release": ["kubectl patch ..."], "reason": "left Terminating: ns/d"}
    recovered = {"recovery": {"status": "PASS", "reason": "held"}, "left_never_injected": left}
    assert overall(ok, recovered) == ("INCONCLUSIVE", ["removal: left Terminating: ns/d"])
    assert overall(ok, {**recovered, "left_never_injected": None}) == ("PASS", [])


def json_skip(stage: int) -> StepResult:
    return StepResult(**json.loads(gates.skipped(stage, "an earlier gate stopped the ramp")))


def test_preflight_refuses_an_experiment_whose_stages_are_not_in_the_pipelines_ramp() -> None:
    import pytest

    from kfchaos.errors import KfchaosError
    from kfchaos.steps.setup import preflight
    from tests.conftest import ROOT

    text = (ROOT / "experiments/vllm-network-delay.yaml").read_text()
    with pytest.raises(KfchaosError, match=r"spec.traffic.stages \[60, 90, 100\] are not stages of this pipeline"):
        preflight(text, "run-1", "[10, 30]")
