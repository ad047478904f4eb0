"""Collect a run's metric series into a MetricsSnapshot: each query's series, or the reason it has none."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from kfchaos.metrics import oom, served
from kfchaos.metrics.catalog import CatalogQuery, Scope, standard_queries
from kfchaos.metrics.prometheus import PrometheusClient, PrometheusError, PrometheusUnreachable
from kfchaos.metrics.snapshot import MetricsSnapshot, Series, SeriesKind
from kfchaos.metrics.source import MetricsSource
from kfchaos.spec import Experiment

PROMETHEUS_ENV = "KFCHAOS_PROMETHEUS_URL"
SCRAPE_SLACK = 60.0  # a kill at the end of a stage shows up a scrape interval or two later
FRESH_WAIT_MAX_S = 30.0  # the longest wait for the scrape after the replay


def snapshot(
    source: MetricsSource, queries: Iterable[CatalogQuery], start: float, end: float, step: float
) -> MetricsSnapshot:
    """Run each query over [start, end]; a failed query is kept with its error, an unreachable server stops."""
    result = MetricsSnapshot(source=source.url)
    for query in queries:
        try:
            found = source.range(query.promql, start, end, step)
        except PrometheusUnreachable as exc:
            result.unreachable = str(exc)
            return result
        except (PrometheusError, ValueError) as exc:
            result.errors[query.name] = str(exc)
            continue
        if not found:
            continue  # no series: `missing()` reports it by name
        if len(found) > 1:
            result.errors[query.name] = f"{len(found)} series; the query must aggregate to one (sum by ...)"
            continue
        kind: SeriesKind = "counter" if query.kind == "counter" else "gauge"
        result.series[query.name] = Series(query.name, found[0].times, found[0].values, kind, query.promql, query.unit)
    return result


def prometheus_url(experiment: Experiment) -> str | None:
    capture = experiment.spec.baseline.capture
    return os.environ.get(PROMETHEUS_ENV) or (capture.prometheus if capture else None)


def snapshot_for_experiment(
    experiment: Experiment,
    window: tuple[float, float],
    *,
    step: float = 15.0,
    pods: tuple[str, ...] = (),
    read_log: oom.CrashLogReader | None = None,
    clock: Callable[[], float] = time.time,
) -> MetricsSnapshot:
    """The standard series for the experiment's target over `window` (plus slack for late scrapes), with the
    OOM counts per container series (kfchaos.metrics.oom), the source's scrape interval as their grace, the
    server's own count of finished requests and the skew between `clock` (this machine's) and Prometheus's
    (kfchaos.metrics.served: what the verdict's metrics_window check reads)."""
    url = prometheus_url(experiment)
    if not url:
        return MetricsSnapshot(
            unreachable=f"no Prometheus configured (set {PROMETHEUS_ENV} or spec.baseline.capture.prometheus)"
        )
    scope = Scope(experiment.spec.target.namespace, pods, model=experiment.spec.target.model)
    client = PrometheusClient(url)
    # Every OOM series comes from kfchaos.metrics.oom (per container, then summed), never from a sum here.
    catalog = standard_queries(scope, window=max(step, 60.0), step=step)
    queries = [q for q in catalog.values() if q.name not in oom.OOM_SERIES]
    start, end = window[0] - step, window[1] + SCRAPE_SLACK
    interval = client.scrape_interval()
    # The replay drained before this step: wait (a few scrape intervals at most) for the scrape that holds its last
    # requests, so the server's count is whole (kfchaos.verdict.clock reads it) and a kill at the end shows.
    if interval is not None:
        served.wait_fresh(client, scope, timeout=min(FRESH_WAIT_MAX_S, 3 * interval + 2.0))
    result = snapshot(client, queries, start, end, step)
    if result.unreachable:
        return result
    result.grace = interval if interval is not None else result.grace
    # Restarts at the scrape's own resolution where that fits Prometheus's points limit.
    oom_step = max(min(step, result.grace), (end - start) / 10_000)
    counted = oom.collect(client, scope, start, end, oom_step, read_log or crash_log_reader())
    result.series.update(counted.series)
    result.errors.update(counted.errors)
    result.unreachable = counted.unreachable
    if result.unreachable:
        return result
    finished = served.served(client, scope, start, end, oom_step)
    result.series.update(finished.series)
    result.errors.update(finished.errors)
    skew = served.clock_skew(client, clock)
    result.clock = skew.to_dict() if skew is not None else None
    return result


def crash_log_reader() -> oom.CrashLogReader | None:
    """Where previous container logs can be read: the demo's supervisor keeps them (local backend), a
    cluster's come from the pod log API (kfchaos.metrics.crashlogs); None where neither is reachable."""
    from kfchaos.metrics import crashlogs

    return crashlogs.from_environment()
