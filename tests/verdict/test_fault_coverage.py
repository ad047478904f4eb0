"""A stage counts as under fault only while the fault was verified active, and there is one stage gate:
burst requests are out of replay fidelity everywhere, and the send-lag tolerance follows the latency."""

from __future__ import annotations

import numpy as np

from kfchaos.faults.activity import FaultActivity
from kfchaos.validate import load_experiment_warnings, parse_experiment
from kfchaos.verdict import Status, evaluate, gate
from kfchaos.verdict.checks import SEND_LAG_SHARE, send_lag_tolerance
from tests.verdict.builders import POD_KILL, concat, experiment, experiment_text, records
from tests.verdict.fixtures import baseline, exponential

START = 1_000_000.0
N = 3000  # 30 s at 100 requests/s


def _activity(*seen: tuple[float, bool]) -> FaultActivity:
    return FaultActivity("kill-one", "kill-one-abc", "PodChaos", [10], START - 5, list(seen))


def _verdict(activity: FaultActivity | None, table=None):
    table = table if table is not None else records(10, np.full(N, 0.05), start=START)
    coverage = {10: [activity]} if activity is not None else None
    return evaluate(table, experiment(stages=[10], faults=POD_KILL), baseline=baseline(0.25), fault_coverage=coverage)


def test_a_stage_whose_fault_stopped_mid_replay_is_inconclusive_naming_fault_and_seconds() -> None:
    # Verified from before the stage until 12 s into its 30 s, then seen stopped.
    stopped = _activity((START - 1, True), (START + 12, True), (START + 12.5, False), (START + 31, False))
    stage = _verdict(stopped).stage(10)
    check = stage.check("fault_active")
    assert check.status is Status.INCONCLUSIVE and check.gating
    assert "kill-one not verified active for 18.0s of the 30.0s replay" in check.reason
    assert check.details["uncovered_s"] > 17.9
    assert stage.status is Status.INCONCLUSIVE
    assert stage.gate is not None and not stage.gate.proceed  # the ramp stops: the rest would be blind too
    assert any("fault_active: kill-one not verified active" in r for r in stage.to_dict()["reasons"])


def test_a_stage_under_its_fault_throughout_passes_the_coverage_check() -> None:
    stage = _verdict(_activity((START - 1, True), (START + 15, True), (START + 31, True))).stage(10)
    assert stage.check("fault_active").status is Status.PASS
    assert stage.gate is not None and stage.gate.proceed, stage.gate.reasons


def test_without_run_state_a_stage_planned_under_a_fault_is_inconclusive_naming_both() -> None:
    # Records judged by hand (no run state): nothing shows the fault ever worked in the stage.
    verdict = _verdict(None)
    check = verdict.stage(10).check("fault_active")
    assert check.status is Status.INCONCLUSIVE and check.gating
    assert "kill-one is planned for stage 10% but was never observed active in it (no fault activity" in check.reason
    assert verdict.stage(10).status is Status.INCONCLUSIVE and verdict.status is Status.INCONCLUSIVE


def test_a_run_state_without_an_observation_of_a_planned_fault_leaves_its_stages_inconclusive() -> None:
    # Two faults planned for stage 10; the run state observed only one of them (and that one throughout).
    two = "[{name: kill-one, type: pod-kill, mode: one}, {name: kill-two, type: pod-kill, mode: one}]"
    seen = _activity((START - 1, True), (START + 31, True))
    table = records(10, np.full(N, 0.05), start=START)
    spec = experiment(stages=[10], faults=two)
    stage = evaluate(table, spec, baseline=baseline(0.25), fault_coverage={10: [seen]}).stage(10)
    checks = {c.details["fault"]: c for c in stage.checks if c.name == "fault_active"}
    assert checks["kill-one"].status is Status.PASS
    assert checks["kill-two"].status is Status.INCONCLUSIVE
    assert "kill-two is planned for stage 10% but was never observed active in it (the run state holds no" in (
        checks["kill-two"].reason
    )
    assert stage.status is Status.INCONCLUSIVE
    # A run state with no entry at all for the stage is the same: no observation.
    empty = evaluate(table, spec, baseline=baseline(0.25), fault_coverage={}).stage(10)
    unseen = {c.details["fault"] for c in empty.checks if c.name == "fault_active" and c.status is Status.INCONCLUSIVE}
    assert unseen == {"kill-one", "kill-two"}


def test_a_fault_planned_for_other_stages_asks_nothing_of_this_one() -> None:
    later = "[{name: kill-one, type: pod-kill, mode: one, stages: [100]}]"
    table = records(10, np.full(N, 0.05), start=START)
    stage = evaluate(table, experiment(stages=[10, 100], faults=later), baseline=baseline(0.25)).stage(10)
    assert all(c.name != "fault_active" for c in stage.checks)


def test_the_stage_gate_is_the_one_evaluate_computes() -> None:
    stage = _verdict(_activity((START - 1, True), (START + 31, True))).stage(10)
    assert stage.gate is not None
    names = {c.name for c in stage.gate.checks}
    assert names == {"replay", "fault_active"}  # no abort rules in this experiment
    assert [c for c in stage.checks if c.name in names] == stage.gate.checks


def test_burst_requests_are_left_out_of_replay_fidelity_in_the_gate_too() -> None:
    # The traffic is on time; the long-context burst (the fault) is sent 2 s late.
    table = concat(
        records(10, exponential(0.05, N), start=START, send_lag=0.001),
        records(10, np.full(50, 5.0), start=START + 1, send_lag=2.0, long_context=True),
    )
    rules = experiment(stages=[10]).spec.abort
    assert gate(table, rules).proceed
    replay = _verdict(None, table).stage(10).check("replay")
    assert replay.status is Status.PASS and replay.samples == N


def test_send_lag_tolerance_is_relative_to_the_latency_measured() -> None:
    rules = experiment(stages=[10]).spec.abort
    # 60 ms late against multi-second requests: harmless.
    slow = records(10, np.full(N, 3.0), start=START, send_lag=0.060)
    assert gate(slow, rules, max_send_lag_p99=0.050).proceed
    # 60 ms late against 200 ms requests: the load was not the one planned.
    fast = records(10, np.full(N, 0.2), start=START, send_lag=0.060)
    result = gate(fast, rules, max_send_lag_p99=0.050)
    assert not result.proceed and "send lag P99 60.0ms > 50ms" in result.reasons[0]
    assert send_lag_tolerance(0.050, 3.0) == SEND_LAG_SHARE * 3.0
    assert send_lag_tolerance(0.050, None) == 0.050


def test_validate_states_the_arithmetic_of_a_fault_that_ends_before_its_stages(tmp_path) -> None:
    # 60 s of pod-kill over two 10-minute stages: Chaos Mesh ends it 60 s into the first one.
    short = "[{name: kill-one, type: pod-kill, mode: one, duration: 60s}]"
    path = tmp_path / "short.yaml"
    path.write_text(experiment_text(stages=[10, 100], faults=short, stage_duration="10m"))
    warnings = [str(w) for w in load_experiment_warnings(path)]
    assert any(
        "spec.faults[0].duration: warning: duration 60s ends before its stages do: stages [10, 100] need "
        "2 x 600s = 1200s of replay alone" in w
        for w in warnings
    ), warnings
    enough = "[{name: kill-one, type: pod-kill, mode: one, duration: 20m}]"
    path.write_text(experiment_text(stages=[10, 100], faults=enough, stage_duration="10m"))
    assert not [w for w in load_experiment_warnings(path) if "ends before its stages" in str(w)]


def test_a_stage_that_applied_a_fraction_of_its_planned_load_is_inconclusive_with_the_figures() -> None:
    spec = experiment(stages=[10])  # 30 s at 100 requests/s planned
    table = records(10, np.full(N, 0.05), start=START)
    full = evaluate(table, spec, baseline=baseline(0.25)).stage(10).check("load")
    assert full.status is Status.PASS and "3000 of 3000 planned requests" in full.reason
    # The replay stopped after 3 s: 300 requests, 10 % of the plan.
    short = evaluate(records(10, np.full(300, 0.05), start=START), spec, baseline=baseline(0.25)).stage(10)
    check = short.check("load")
    assert check.status is Status.INCONCLUSIVE and short.status is Status.INCONCLUSIVE
    assert "ran 3.0s of its planned 30s (10%" in check.reason
    assert "sent 300 of its 3000 planned requests (10%" in check.reason
    # The full 30 s, at a tenth of the rate (a shard's records missing): the duration alone does not show it.
    thin = evaluate(records(10, np.full(300, 0.05), start=START, rate=10.0), spec, baseline=baseline(0.25))
    thin_check = thin.stage(10).check("load")
    assert thin_check.status is Status.INCONCLUSIVE
    assert "ran" not in thin_check.reason and "sent 300 of its 3000 planned requests" in thin_check.reason


def test_recorded_traffic_checks_each_stage_against_the_ramps_rate_per_percent() -> None:
    # A recording: every stage replays it from its start keeping stage/100 of its requests, so 10 % and 30 %
    # send in the ratio 1:3. The plan's own rate is unknown to the verdict; the other stages give it.
    text = experiment_text(stages=[10, 30]).replace("synthetic: {rate: 1000}", "file: prod.jsonl")
    spec = parse_experiment(text, "recorded.yaml")
    low = records(10, np.full(N, 0.05), start=START)  # 100/s for 30 s
    full = records(30, np.full(3 * N, 0.05), start=START + 60, rate=300.0)
    thin = records(30, np.full(N // 10, 0.05), start=START + 60, rate=10.0)  # a tenth of it: a shard lost
    assert evaluate(concat(low, full), spec, baseline=baseline(0.25)).stage(30).check("load").status is Status.PASS
    check = evaluate(concat(low, thin), spec, baseline=baseline(0.25)).stage(30).check("load")
    assert check.status is Status.INCONCLUSIVE and "the other stages' rate per percent" in check.reason
    alone = parse_experiment(experiment_text(stages=[10]).replace("synthetic: {rate: 1000}", "file: p.jsonl"), "a")
    one = evaluate(low, alone, baseline=baseline(0.25)).stage(10).check("load")
    assert one.status is Status.PASS and "duration checked only" in one.reason
