"""The demo is sized so the verdicts it promises can be shown with the samples it gathers.

A P99-type check (p99_drift, p99, ttft_p99) PASSes only when the Clopper-Pearson upper bound of the share
of requests above the limit is under 1 % (kfchaos.verdict.checks); a rate check likewise. These tests plan
the demo's stages exactly as the replay does (same seed) and check the arithmetic: every stage has the
requests a PASS needs even when one request is slow, and the unsafe scenario is bound to be OOM-killed.
"""

from __future__ import annotations

from pathlib import Path

from kfchaos.demo.runner.scenarios import (
    DEMO_EXPERIMENT,
    SCENARIOS,
    ScenarioResult,
    builtin,
    control_stages,
    surprise_lines,
)
from kfchaos.demo.server.engine import EngineConfig
from kfchaos.traffic.api import plan_stage
from kfchaos.validate import load_experiment
from kfchaos.verdict.stats import TAIL, clopper_pearson

CONFIDENCE = 0.95


def samples_to_pass(above: int) -> int:
    """The fewest requests with `above` of them beyond the limit whose interval is wholly under 1 %."""
    n = above + 1
    while clopper_pearson(above, n, CONFIDENCE)[1] >= TAIL:
        n += 1
    return n


def test_the_clopper_pearson_rule_gives_the_documented_figures() -> None:
    # The figures the experiment's comment and the README quote; 673 with 2 above (the issue) cannot PASS.
    assert [samples_to_pass(k) for k in (0, 1, 2)] == [368, 555, 720]
    assert clopper_pearson(2, 673, CONFIDENCE)[1] > TAIL


def test_every_stage_gathers_enough_requests_for_a_pass_with_one_slow_request() -> None:
    experiment = load_experiment(DEMO_EXPERIMENT)
    slo = experiment.spec.slo
    for stage in experiment.spec.traffic.stages:
        plan = plan_stage(experiment, stage, base_dir=DEMO_EXPERIMENT.parent)
        planned = [p for p in plan.schedule() if not p.request.long_context]
        # Poisson arrivals: the plan is one draw; the 2.5 % low end of Poisson(n) is about n - 2 sqrt(n).
        low = len(planned) - 2 * len(planned) ** 0.5
        assert low >= samples_to_pass(0), (stage, len(planned))
        assert len(planned) >= samples_to_pass(1) * 0.75, (stage, len(planned))
        assert low >= slo.min_samples


def test_the_unsafe_server_is_bound_to_be_oom_killed_and_the_tuned_one_never() -> None:
    experiment = load_experiment(DEMO_EXPERIMENT)
    burst = next(f for f in experiment.spec.faults if f.type == "long-context-burst")
    for name, (_, settings) in SCENARIOS.items():
        config = EngineConfig(
            max_num_seqs=settings.max_num_seqs,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            enable_prefix_caching=settings.enable_prefix_caching,
        )
        oom_blocks = (config.memory_limit_bytes - config.host_base_bytes) / (
            config.host_kv_mirror_ratio * config.block_bytes
        )
        burst_blocks = burst.params.requests * burst.params.context_tokens / config.block_size  # type: ignore[attr-defined]
        if name == "unsafe":
            # Without prefix caching every burst request holds its own context, more than fits under the limit.
            assert burst_blocks > oom_blocks and config.host_peak_bytes > config.memory_limit_bytes
        else:
            assert config.host_peak_bytes < config.memory_limit_bytes  # the pool's mirror can never reach it


def test_a_scenario_that_did_not_turn_out_as_designed_says_why() -> None:
    results = [
        ScenarioResult("unsafe", "", "FAIL", Path("runs/a"), ["FAIL stage 75%: oom_kill_rate: 1 OOM kill(s)"], 1),
        ScenarioResult("tuned", "", "INCONCLUSIVE", Path("runs/b"), ["INCONCLUSIVE stage 75%: p99_drift: 2/673"], 0),
    ]
    (line,) = surprise_lines(results)
    assert line.startswith("kfchaos demo: tuned: expected PASS, got INCONCLUSIVE because INCONCLUSIVE stage 75%")
    assert surprise_lines(results[:1]) == []


# Measured on the demo server (2 cores, busy): a decode step takes its configured time plus ~0.1 s of Python work
# (one SSE write per running request), and a request waits about half a step for its first one.
STEP_OVERHEAD_S = 0.10


def test_the_tuned_server_does_not_queue_at_the_top_stage_even_during_a_burst() -> None:
    # Requests beyond --max-num-seqs wait for a slot, and that wait lands in the P99 the drift is judged on:
    # the tuned server's margin must not depend on it. Concurrency = rate x latency (Little's law).
    experiment = load_experiment(DEMO_EXPERIMENT)
    _, settings = SCENARIOS["tuned"]
    traffic = experiment.spec.traffic
    assert traffic.synthetic is not None
    step = settings.decode_step_ms / 1000 + STEP_OVERHEAD_S
    latency = (traffic.synthetic.output_tokens.mean + 0.5) * step + 0.2  # + the 200 ms network delay
    rate = traffic.synthetic.rate * max(traffic.stages) / 100
    burst = next(f for f in experiment.spec.faults if f.type == "long-context-burst")
    assert rate * latency + burst.params.requests <= 0.95 * settings.max_num_seqs  # type: ignore[attr-defined]
    # ... and the delay is a small share of the latency, so the drift limit leaves room for the burst's prefill.
    assert 0.2 / latency < experiment.spec.slo.p99_drift_max / 3


def test_recovery_is_observed_by_a_probe_that_gathers_requests() -> None:
    # recovery_max makes recovery gating: the probe after removal lasts min(recovery_max, stage) and must hold
    # enough requests for at least one measured window (kfchaos.verdict.recovery.MIN_WINDOW_REQUESTS).
    from kfchaos.verdict.recovery import MIN_WINDOW_REQUESTS, RECOVERY_WINDOW

    experiment = load_experiment(DEMO_EXPERIMENT)
    slo, traffic = experiment.spec.slo, experiment.spec.traffic
    assert slo.recovery_max is not None and traffic.synthetic is not None
    probe = min(slo.recovery_max, traffic.stage_duration)
    assert probe >= RECOVERY_WINDOW
    assert traffic.synthetic.rate * traffic.stages[0] / 100 * RECOVERY_WINDOW / 2 >= MIN_WINDOW_REQUESTS


def test_only_the_unsafe_scenario_records_a_shorter_control_and_only_its_first_stage() -> None:
    experiment = load_experiment(DEMO_EXPERIMENT)
    assert control_stages(builtin("unsafe")) == [experiment.spec.traffic.stages[0]]
    assert control_stages(builtin("tuned")) is None
