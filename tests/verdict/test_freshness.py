"""Series freshness: a series that stopped being sampled inside a judged window is unknown there, not zero.

The snapshots are what kfchaos.metrics.oom writes (cumulative counts on the query grid) with the sample times a
`timestamp()` query returns: after the last scrape, Prometheus's lookback (promql/engine.go lookbackDelta)
keeps returning the last sample, so the count stays flat while its sample time stands still.
"""

from __future__ import annotations

import numpy as np

from kfchaos.metrics import oom
from kfchaos.metrics.names import DEPENDENCY_PREFIX
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.verdict import Status, evaluate, gate
from tests.verdict.builders import experiment, records
from tests.verdict.fixtures import baseline, exponential, oom_snapshot

START = 1_000_000.0
N = 3000  # 30 s at 100 requests/s: the builders' planned stage


def stopped(snapshot: MetricsSnapshot, at: float) -> MetricsSnapshot:
    """The same counts, their source unscraped from `at` on (sample times frozen by the lookback)."""
    for name, series in snapshot.series.items():
        sampled = np.where(series.times <= at, series.times, at)
        snapshot.series[name] = Series(name, series.times, series.values, series.kind, series.query, sampled=sampled)
    return snapshot


def test_an_oom_count_whose_source_stopped_mid_stage_cannot_pass() -> None:
    table = records(10, exponential(0.05, N), start=START)
    spec = experiment(stages=[10])
    fresh = stopped(oom_snapshot(START, START + 30), START + 60)
    assert evaluate(table, spec, baseline=baseline(), metrics=fresh).status is Status.PASS
    gap = stopped(oom_snapshot(START, START + 30), START + 10)
    check = evaluate(table, spec, baseline=baseline(), metrics=gap).stage(10).check("oom_kill_rate")
    assert check.status is Status.INCONCLUSIVE
    assert f"series {oom.HOST_OOM} has no sample from" in check.reason and "unknown, not zero" in check.reason
    # Kills shown before the gap still FAIL: the gap can only add to them.
    killed = stopped(oom_snapshot(START, START + 30, kills_at={START + 5: 1}), START + 10)
    assert evaluate(table, spec, baseline=baseline(), metrics=killed).stage(10).check("oom_kill_rate").status is (
        Status.FAIL
    )


def test_the_sample_times_survive_the_snapshot_file(tmp_path) -> None:
    gap = stopped(oom_snapshot(START, START + 30), START + 10)
    gap.write(tmp_path / "metrics.json")
    again = MetricsSnapshot.load(tmp_path / "metrics.json")
    table = records(10, exponential(0.05, N), start=START)
    verdict = evaluate(table, experiment(stages=[10]), baseline=baseline(), metrics=again)
    assert verdict.stage(10).check("oom_kill_rate").status is Status.INCONCLUSIVE


def test_an_abort_rule_that_did_not_trip_over_a_gap_is_inconclusive() -> None:
    rule = experiment(stages=[10], abort="[{metric: oom_kills, above: '0', window: 10s}]").spec.abort
    table = records(10, exponential(0.05, N), start=START)
    assert gate(table, rule, metrics=stopped(oom_snapshot(START, START + 30), START + 60)).proceed
    blind = gate(table, rule, metrics=stopped(oom_snapshot(START, START + 30), START + 10))
    assert blind.status is Status.INCONCLUSIVE and not blind.proceed
    assert "no sample from" in blind.checks[0].reason
    # A dependency gauge whose points end mid-stage (a stale-marked series: no points after it) likewise.
    dep = experiment(stages=[10], abort="[{metric: dependency_p99, above: 100ms, dependency: any}]").spec.abort
    times = np.arange(START - 5, START + 12, 1.0)
    name = f"{DEPENDENCY_PREFIX}redis"
    snapshot = MetricsSnapshot(series={name: Series(name, times, np.full(len(times), 0.02))}, grace=1.0)
    assert gate(table, dep, metrics=snapshot).status is Status.INCONCLUSIVE
