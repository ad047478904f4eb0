"""Baselines, metric snapshots and exact samples of known distributions for verdict tests."""

from __future__ import annotations

import math

import numpy as np

from kfchaos.baseline import Baseline, Provenance, SeriesStat, Totals, Window
from kfchaos.metrics.names import OOM_KILLS
from kfchaos.metrics.snapshot import MetricsSnapshot, Series

LN100 = math.log(100.0)  # P99 of an exponential with scale 1


def exponential(scale: float, n: int) -> np.ndarray:
    """An exact (stratified) sample: the empirical distribution is the exponential's quantiles, so a share
    above a threshold is the true tail share, with no sampling luck in the tests."""
    u = (np.arange(n) + 0.5) / n
    return np.asarray(-scale * np.log1p(-u))


def baseline(p99: float = LN100, captured_at: str = "2026-12-01T00:00:00Z") -> Baseline:
    return Baseline(
        experiment="verdict-test",
        captured_at=captured_at,
        provenance=Provenance(
            prometheus="http://127.0.0.1:9090",
            queries={"latency_p99": "histogram_quantile(0.99, ...)"},
            window=Window(start="2026-11-24T00:00:00Z", end="2026-12-01T00:00:00Z"),
            step=300.0,
        ),
        series={"latency_p99": SeriesStat(median=p99, spread=0.01, p10=p99 * 0.95, p90=p99 * 1.05, intervals=2016)},
        totals=Totals(requests=1_000_000, errors=100, error_rate=1e-4, oom_kills=0, oom_kill_rate=0.0),
    ).sealed()


def oom_snapshot(start: float, end: float, kills_at: dict[float, int] | None = None) -> MetricsSnapshot:
    """A counter scraped every 5 s from before `start` to after `end`, stepping up by kills at given times."""
    times = np.arange(start - 30, end + 30, 5.0)
    values = np.zeros(len(times))
    for at, count in (kills_at or {}).items():
        values[times >= at] += count
    series = Series(OOM_KILLS, times, values, "counter", "sum(container_oom_events_total{...})")
    return MetricsSnapshot(source="http://127.0.0.1:9090", series={OOM_KILLS: series})
