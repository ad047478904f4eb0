"""The server's own count of the requests it finished, and the skew between this machine's clock and Prometheus's.

Both let the verdict check that the metrics window holds the run (kfchaos.verdict.clock): every time the verdict
reads from Prometheus (OOM kills per stage, abort rules) comes from the records, whose clock is the replayer's.
If that clock and Prometheus's disagree, or the snapshot was taken over another window, the series are read
at the wrong times and say nothing of the run -- a kill during the run falls outside every window read.

- `served`: vLLM observes `vllm:e2e_request_latency_seconds` once per finished request (vllm-project/vllm
  vllm/v1/metrics/loggers.py), so its `_count` counts them. Each series is differenced on its own by the one rule
  for counters (kfchaos.metrics.counters: a drop is a counter reset, a restarted server; a first sample sets the
  level, unless the pod's kube_pod_created puts its birth inside the range, when it is a new server counted from
  0) and only then summed, as kfchaos.metrics.oom counts restarts; the snapshot holds the cumulative count on the
  grid. An old server seen again after a scrape gap adds nothing: its lifetime count is not the run's.
- `clock_skew`: Prometheus's `time()` evaluated now, against this machine's clock read before and after the
  call: skew = Prometheus - local at the midpoint, uncertain by half the round trip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kfchaos.metrics import counters, names, oom
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusError, PrometheusUnreachable
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.metrics.source import MetricsSource

COUNTER = "vllm:e2e_request_latency_seconds_count"


def served(source: MetricsSource, scope: Scope, start: float, end: float, step: float) -> MetricsSnapshot:
    """The `server_requests` series over [start, end] (cumulative finished requests), or why there is none."""
    result = MetricsSnapshot(source=source.url)
    query = f"{COUNTER}{{{scope.vllm_matchers()}}}"
    try:
        found = source.range(query, start, end, step)
    except PrometheusUnreachable as exc:
        result.unreachable = str(exc)
        return result
    except (PrometheusError, ValueError) as exc:
        result.errors[names.SERVER_REQUESTS] = str(exc)
        return result
    if not found:
        return result  # `missing()` names it
    grid = np.arange(start, end + step / 2, step, dtype=np.float64)
    try:
        created = oom.creation_times(source.range(f"{oom.CREATED_METRIC}{{{scope.matchers()}}}", start, end, step))
    except (PrometheusError, ValueError):
        created = {}  # no birth known: every series counts from its first sample, which never overcounts
    events: list[tuple[float, float]] = []
    restarts: list[tuple[float, float]] = []
    for series in found:
        pod = f"{series.labels.get('namespace', '')}/{series.labels.get('pod', '')}"
        events += counters.events(series, start, created.get(pod))
        restarts += counters.resets(series)
    counted = oom.cumulative(names.SERVER_REQUESTS, grid, events, f"{query}, increase per series, then summed")
    result.series[names.SERVER_REQUESTS] = counted
    # Where a server process ended: its counts since its last scrape are in no series (kfchaos.verdict.clock).
    dropped = oom.cumulative(names.SERVER_RESTARTS, grid, restarts, f"drops of {query}, per series")
    result.series[names.SERVER_RESTARTS] = dropped
    return result


POLL_S = 0.25


def wait_fresh(
    source: MetricsSource, scope: Scope, timeout: float, sleep: Callable[[float], None] = time.sleep
) -> bool:
    """Until Prometheus holds a sample of the server's counter taken after this call began, by Prometheus's own
    clock (`time()`, so a skewed local clock does not matter): the requests that finished before it are then in
    the series. A pipeline collects right after its replay drained, and a request that finished in the last scrape
    interval is not yet counted. Bounded by `timeout`; False when no fresh sample came (or no counter exists)."""
    query = f"max(timestamp({COUNTER}{{{scope.vllm_matchers()}}}))"
    try:
        now = source.instant("time()")
        if len(now) != 1:
            return False
        began, deadline = now[0].value, time.monotonic() + timeout
        while True:
            newest = source.instant(query)
            if not newest:
                return False
            if newest[0].value >= began:
                return True
            if time.monotonic() >= deadline:
                return False
            sleep(POLL_S)
    except (PrometheusError, ValueError):
        return False


@dataclass(frozen=True)
class ClockSkew:
    skew_s: float  # Prometheus's clock minus this machine's
    uncertainty_s: float  # half the round trip of the query
    measured_at: float  # this machine's clock, at the midpoint

    def to_dict(self) -> dict[str, float]:
        return {"skew_s": self.skew_s, "uncertainty_s": self.uncertainty_s, "measured_at": self.measured_at}


def clock_skew(source: MetricsSource, clock: Callable[[], float] = time.time) -> ClockSkew | None:
    """Prometheus's `time()` against `clock`; None where the source cannot say (no answer, not a Prometheus)."""
    before = clock()
    try:
        samples = source.instant("time()")
    except (PrometheusError, ValueError):
        return None
    after = clock()
    if len(samples) != 1 or not np.isfinite(samples[0].value):
        return None
    middle = (before + after) / 2
    return ClockSkew(samples[0].value - middle, (after - before) / 2, middle)
