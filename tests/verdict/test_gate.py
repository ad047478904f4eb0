"""Abort rules over time windows: the stage gate that stops the ramp."""

from __future__ import annotations

import numpy as np

from kfchaos.metrics.names import DEPENDENCY_PREFIX
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.verdict import Status, evaluate, gate
from tests.verdict.builders import experiment, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0
N = 6000  # 60 s at 100 requests/s


def with_errors(bad_seconds: list[tuple[float, float]], every: int = 10):
    """Records where requests in the given second ranges fail with HTTP 503 one in `every`."""
    status = np.full(N, 200)
    t = np.arange(N) / 100.0
    for low, high in bad_seconds:
        hit = (t >= low) & (t < high) & (np.arange(N) % every == 0)
        status[hit] = 503
    errors = [("http" if s == 503 else None) for s in status]
    return records(10, exponential(0.05, N), start=START, error=errors, status=status)


def rules(text: str):
    return experiment(stages=[10], abort=text).spec.abort


ERROR_RULE = "[{metric: error_rate, above: 5%, window: 10s, consecutive: 2}]"


def test_rate_above_threshold_in_consecutive_windows_trips() -> None:
    result = gate(with_errors([(10, 30)]), rules(ERROR_RULE))
    assert not result.proceed and result.status is Status.FAIL
    check = result.checks[0]
    assert check.name == "abort.error_rate" and check.status is Status.FAIL
    assert check.value == 0.1
    assert check.details["tripped_at"] == START + 30


def test_one_bad_window_does_not_trip_a_two_window_rule() -> None:
    result = gate(with_errors([(10, 20), (40, 50)]), rules(ERROR_RULE))
    assert result.proceed, result.reasons
    assert result.checks[0].details["longest_run_above"] == 1


def test_p99_latency_rule() -> None:
    latencies = exponential(0.05, N)
    latencies[3000:3100] = 5.0  # one second of 5 s responses in window [30, 40): 100 of 1000 requests
    table = records(10, latencies, start=START)
    tripped = gate(table, rules("[{metric: p99_latency, above: 1s, window: 10s}]"))
    assert tripped.status is Status.FAIL
    assert tripped.checks[0].value == 5.0
    calm = gate(table, rules("[{metric: p99_latency, above: 6s, window: 10s}]"))
    assert calm.proceed


def test_oom_rule_needs_the_series_and_trips_on_a_kill() -> None:
    rule = rules("[{metric: oom_kills, above: '0', window: 1m}]")
    table = with_errors([])
    blind = gate(table, rule)
    assert blind.status is Status.INCONCLUSIVE and not blind.proceed
    killed = gate(table, rule, metrics=oom_snapshot(START, START + 60, kills_at={START + 20: 1}))
    assert killed.status is Status.FAIL
    quiet = gate(table, rule, metrics=oom_snapshot(START, START + 60))
    assert quiet.proceed, quiet.reasons


def test_dependency_rule_reads_its_gauge() -> None:
    experiment_with_dep = experiment(stages=[10], abort="[{metric: dependency_p99, above: 100ms, dependency: any}]")
    times = np.arange(START, START + 60, 5.0)
    values = np.where(times > START + 30, 0.3, 0.02)
    snapshot = MetricsSnapshot(series={f"{DEPENDENCY_PREFIX}redis": Series(f"{DEPENDENCY_PREFIX}redis", times, values)})
    result = gate(with_errors([]), experiment_with_dep.spec.abort, metrics=snapshot)
    assert result.status is Status.FAIL
    assert "dependency_p99:* missing" in gate(with_errors([]), experiment_with_dep.spec.abort).reasons[0]


def test_a_tripped_rule_fails_the_stage_in_the_verdict() -> None:
    spec = experiment(stages=[10], abort=ERROR_RULE)
    verdict = evaluate(with_errors([(10, 30)]), spec, baseline=baseline(), metrics=oom_snapshot(START, START + 60))
    assert verdict.stage(10).check("abort.error_rate").status is Status.FAIL
    assert verdict.status is Status.FAIL
