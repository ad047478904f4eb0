"""Baselines, metric snapshots and exact samples of known distributions for verdict tests."""

from __future__ import annotations

import math

import numpy as np

from kfchaos.baseline import (
    Baseline,
    ControlBaseline,
    LatencyHistogram,
    Precision,
    Provenance,
    SeriesStat,
    Totals,
    Window,
)
from kfchaos.metrics import oom
from kfchaos.metrics.snapshot import MetricsSnapshot, Series

LN100 = math.log(100.0)  # P99 of an exponential with scale 1


def exponential(scale: float, n: int) -> np.ndarray:
    """An exact (stratified) sample: the empirical distribution is the exponential's quantiles, so a share
    above a threshold is the true tail share, with no sampling luck in the tests."""
    u = (np.arange(n) + 0.5) / n
    return np.asarray(-scale * np.log1p(-u))


# Buckets 5 % apart: fine enough to resolve the 15 % drift the tests use.
FINE_BUCKETS = [float(b) for b in np.geomspace(0.01, 200.0, 204)]


def baseline(
    p99: float = LN100,
    captured_at: str = "2026-12-01T00:00:00Z",
    *,
    buckets: list[float] | None = FINE_BUCKETS,
    control: ControlBaseline | None = None,
) -> Baseline:
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
        latency_histogram=None if buckets is None else LatencyHistogram(query="count by (le) (...)", bounds=buckets),
        control=control,
        # 2016 five-minute intervals of 500 requests each, as a capture records them
        # (kfchaos.baselinecapture._precision).
        precision=Precision(
            step=300.0,
            intervals=2016,
            requests_min=500,
            requests_p10=500,
            requests_median=500,
            requests_total=1_008_000,
        ),
    ).sealed()


def oom_snapshot(
    start: float,
    end: float,
    kills_at: dict[float, int] | None = None,
    *,
    gpu_at: dict[float, int] | None = None,
    unread_at: dict[float, int] | None = None,
    grace: float = 5.0,
) -> MetricsSnapshot:
    """The OOM series as kfchaos.metrics.oom writes them (cumulative counts on a 5 s grid from before `start`
    to after `end`): host OOM kills, GPU OOM crashes and unread crashes stepping up at the given times."""
    times = np.arange(start - 30, end + 30, 5.0)

    def cumulative(name: str, events: dict[float, int] | None) -> Series:
        values = np.zeros(len(times))
        for at, count in (events or {}).items():
            values[times >= at] += count
        return Series(name, times, values, "counter", "kube_pod_container_status_restarts_total x reason")

    series = {
        oom.HOST_OOM: cumulative(oom.HOST_OOM, kills_at),
        oom.GPU_OOM: cumulative(oom.GPU_OOM, gpu_at),
        oom.UNREAD: cumulative(oom.UNREAD, unread_at),
        oom.CRASHES: cumulative(oom.CRASHES, {**(gpu_at or {}), **(unread_at or {})}),
    }
    return MetricsSnapshot(source="http://127.0.0.1:9090", series=series, grace=grace)
