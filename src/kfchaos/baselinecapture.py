"""A baseline captured from Prometheus (`kfchaos baseline capture`): the standard queries over N days ending now,
release windows (given, and detected from the rollouts) excluded, every value checked for sense before it is kept,
and the rest summarised robustly into a sealed Baseline (kfchaos.baseline, the file's model).

Apart from the model because it needs the metrics client: it sits in the results layer beside the other readers
of metrics (`evidence | baselinecapture`, docs/architecture.md), and only what captures (`kfchaos baseline
capture`, the demo) imports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
from numpy.typing import NDArray

from kfchaos.baseline import (
    LATENCY_SERIES,
    Baseline,
    BaselineError,
    BaselineScope,
    Coverage,
    Exclusion,
    LatencyHistogram,
    Precision,
    Provenance,
    SenseBounds,
    SeriesStat,
    Totals,
    Window,
    format_time,
    parse_time,
)
from kfchaos.metrics import oom, releases
from kfchaos.metrics.catalog import Scope, standard_queries, with_user_queries
from kfchaos.metrics.histogram import wide_bucket_warning
from kfchaos.metrics.prometheus import PrometheusError
from kfchaos.metrics.source import MetricsSource, as_series

# Without spec.target.timeout (a direct `capture()` call): an hour is past any request an LLM server answers.
DEFAULT_LATENCY_MAX_S = 3600.0


def _refuse_nonsense(name: str, times: NDArray[np.float64], values: NDArray[np.float64], sense: SenseBounds,
                     window: tuple[float, float], latency: bool) -> None:  # fmt: skip
    """Values from Prometheus checked before they are kept: a point outside the capture window (plus one step
    each side), a latency outside [0, the request timeout] (+Inf too: the quantile fell past the histogram's
    last finite bucket, which a baseline cannot summarise), or a count below zero or infinite. NaN is
    Prometheus's "no data in this interval" and is left to the statistics, which skip it."""
    low, high = window
    outside = (times < low) | (times > high) | ~np.isfinite(times)
    if outside.any():
        at = float(times[np.argmax(outside)])
        raise BaselineError(
            f"{name}: Prometheus answered a point at {at!r} (epoch s), outside the capture window "
            f"{sense.points_from}..{sense.points_to}: not an answer to this query; refusing to seal it"
        )
    known = values[~np.isnan(values)]
    if latency:
        bad = (known < sense.latency_min_s) | (known > sense.latency_max_s)
        what = f"a latency outside [0, {sense.latency_max_s:g}s] (the request timeout)"
    else:
        bad = (known < sense.count_min) | ~np.isfinite(known)
        what = "a count below zero or infinite"
    if bad.any():
        raise BaselineError(
            f"{name}: Prometheus answered {float(known[np.argmax(bad)])!r}, {what}; refusing to seal a baseline "
            "from it (check the query and the server)"
        )


# The mission's rule: a baseline stands for at least 7 days of production, releases excluded. Fewer days (or less
# history than asked) only with an explicit reason, which the baseline records and every verdict using it shows.
MIN_DAYS = 7
MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates the standard deviation of a normal sample


def robust_stat(values: NDArray[np.float64], unit: str = "s") -> SeriesStat | None:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    median = float(np.median(finite))
    return SeriesStat(
        median=median,
        spread=float(np.median(np.abs(finite - median)) * MAD_TO_SIGMA),
        p10=float(np.quantile(finite, 0.10)),
        p90=float(np.quantile(finite, 0.90)),
        intervals=len(finite),
        unit=unit,
    )


def kept_intervals(times: NDArray[np.float64], step: float, excluded: list[tuple[float, float]]) -> NDArray[np.bool_]:
    """Whether each evaluation at `t` (covering (t - step, t]) stays clear of every excluded window."""
    keep = np.ones(len(times), dtype=bool)
    for start, end in excluded:
        keep &= ~((times - step < end) & (times > start))
    return keep


def capture(
    experiment: str,
    source: MetricsSource,
    scope: Scope,
    *,
    end: datetime,
    days: int = 7,
    step: float = 300.0,
    release_windows: Sequence[tuple[datetime, datetime]] = (),
    release_margin: float = 1800.0,
    detect_releases: bool = True,
    user_queries: dict[str, str] | None = None,
    drift: float = 0.15,
    now: datetime | None = None,
    request_timeout: float | None = None,
    short_history: str | None = None,
    target: BaselineScope | None = None,
) -> Baseline:
    """A baseline over `days` ending at `end`, release windows (+/- margin) excluded. Raises BaselineError
    when the latency series has no data at all (an empty baseline would pass anything), when a value from
    Prometheus makes no sense (SenseBounds; latencies bounded by `request_timeout`, spec.target.timeout), and
    when `days` is below MIN_DAYS or the history holds less than `days` -- unless `short_history` gives the
    reason, which is then recorded in the baseline (coverage.override, and a warning every verdict using it
    shows). `target`: whose production this is (recorded as the baseline's scope). vLLM's series are kept to
    `scope.model`; in a namespace serving several models the other series are kept to the model's pods
    (`model_scope`), and without a model such a namespace is refused: its figures would mix the models."""
    if days < MIN_DAYS and not short_history:
        raise BaselineError(
            f"capture.days {days}: a baseline stands for at least {MIN_DAYS} days of production, releases "
            "excluded; give capture.short_history (--short-history) with the reason to accept fewer -- it is "
            "recorded in the baseline and shown in every verdict that uses it"
        )
    start = end - timedelta(days=days)
    t0, t1 = start.timestamp(), end.timestamp()
    scope = model_scope(source, scope, t0, t1)
    sense = SenseBounds(
        latency_max_s=request_timeout or DEFAULT_LATENCY_MAX_S,
        points_from=format_time(start - timedelta(seconds=step)),
        points_to=format_time(end + timedelta(seconds=step)),
    )
    window = (t0 - step, t1 + step)
    catalog = with_user_queries(standard_queries(scope, window=step), user_queries or {})
    used: dict[str, str] = {}
    exclusions = [
        Exclusion(
            start=format_time(a - timedelta(seconds=release_margin)),
            end=format_time(b + timedelta(seconds=release_margin)),
            source="explicit",
        )
        for a, b in release_windows
    ]
    release_notes: list[str] = []
    if detect_releases:
        # The whole rollout, not just the generation change (kfchaos.metrics.releases), +/- the margin.
        found, release_notes, sent = releases.detect(source, scope.namespace, t0, t1, step)
        used.update(sent)
        for release in found:
            exclusions.append(
                Exclusion(
                    start=format_time(datetime.fromtimestamp(release.start - release_margin, UTC)),
                    end=format_time(datetime.fromtimestamp(release.end + release_margin, UTC)),
                    source="detected",
                    reason=release.reason,
                )
            )
    excluded = [(parse_time(e.start).timestamp(), parse_time(e.end).timestamp()) for e in exclusions]

    raw: dict[str, tuple[NDArray[np.float64], NDArray[np.float64]]] = {}

    def fetch(name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        query = catalog[name]
        used[name] = query.promql
        ranged = (
            source.range_chunked(query.promql, t0, t1, step)
            if hasattr(source, "range_chunked")
            else (source.range(query.promql, t0, t1, step))
        )
        times, values = as_series(ranged)
        _refuse_nonsense(name, times, values, sense, window, latency=name in LATENCY_SERIES)
        raw[name] = (times, values)
        keep = kept_intervals(times, step, excluded)
        return times[keep], values[keep]

    series: dict[str, SeriesStat] = {}
    for name in LATENCY_SERIES:
        stat = robust_stat(fetch(name)[1])
        if stat is not None:
            series[name] = stat
    if "latency_p99" not in series:
        raise BaselineError(
            f"no latency data from {source.url} for {catalog['latency_p99'].promql} between "
            f"{format_time(start)} and {format_time(end)} (after exclusions); nothing to compare with"
        )
    coverage, coverage_notes = _coverage(raw["latency_p99"], days, step, excluded, series, short_history, source.url)
    request_times, request_counts = fetch("requests")
    requests = float(np.nansum(request_counts))
    precision = _precision(raw["latency_p99"], (request_times, request_counts), step, excluded)
    _, error_values = fetch("errors")
    errors = float(np.nansum(error_values)) if len(error_values) else None
    oom_notes: list[str] = []
    oom_kills = _oom_kills(source, scope, t0, t1, step, excluded, used, oom_notes)
    if errors is not None and errors > requests:
        raise BaselineError(
            f"Prometheus counts {errors:g} errors out of {requests:g} requests: an error rate above "
            f"{sense.rate_max:g} is not a rate; refusing to seal it (check the errors and requests queries)"
        )
    if oom_kills is not None and not 0 <= oom_kills < math.inf:
        raise BaselineError(f"Prometheus counts {oom_kills!r} OOM kills: not a count; refusing to seal it")
    totals = Totals(
        requests=requests,
        errors=errors,
        error_rate=None if errors is None or requests <= 0 else errors / requests,
        oom_kills=oom_kills,
        oom_kill_rate=None if oom_kills is None or requests <= 0 else oom_kills / requests,
    )
    # Before the provenance is built: the bucket query behind any resolution warning is part of it.
    histogram, notes = _latency_histogram(source, scope, t1, series["latency_p99"].median, drift, used)
    provenance = Provenance(
        prometheus=source.url,
        queries=used,
        window=Window(start=format_time(start), end=format_time(end)),
        step=step,
        release_margin=release_margin,
        exclusions=exclusions,
    )
    captured = format_time(now or datetime.now(UTC))
    return Baseline(
        experiment=experiment,
        captured_at=captured,
        provenance=provenance,
        series=series,
        totals=totals,
        warnings=coverage_notes + release_notes + oom_notes + notes,
        latency_histogram=histogram,
        sense=sense,
        coverage=coverage,
        scope=None if target is None else target.model_copy(update={"pods": list(scope.pods)}),
        precision=precision,
    ).sealed()


def _precision(
    latency: tuple[NDArray[np.float64], NDArray[np.float64]],
    requests: tuple[NDArray[np.float64], NDArray[np.float64]],
    step: float,
    excluded: list[tuple[float, float]],
) -> Precision:
    """The request count behind each kept latency interval (the `requests` series, one increase per step, on the
    same grid as the latency P99s)."""
    times, p99 = latency
    kept = kept_intervals(times, step, excluded) & np.isfinite(p99)
    counts = dict(zip(requests[0].tolist(), requests[1].tolist(), strict=True))
    behind = np.array([counts.get(t, np.nan) for t in times[kept].tolist()], dtype=np.float64)
    behind = behind[np.isfinite(behind)]
    if not len(behind):
        return Precision(step=step, intervals=0, requests_min=0, requests_p10=0, requests_median=0, requests_total=0)
    return Precision(
        step=step,
        intervals=len(behind),
        requests_min=float(behind.min()),
        requests_p10=float(np.quantile(behind, 0.10)),
        requests_median=float(np.median(behind)),
        requests_total=float(behind.sum()),
    )


MODEL_SERIES = "vllm:e2e_request_latency_seconds_count"


def model_scope(source: MetricsSource, scope: Scope, t0: float, t1: float) -> Scope:
    """The scope the capture reads: the models vLLM's series show in it over [t0, t1] (label model_name) decide.
    One model, or the target's among others: vLLM's series are kept to it (Scope.model), and with other models
    beside it the other series (HTTP errors, kube-state-metrics) are kept to the pods that served it -- unless
    pods were given. Several models and no target model: refused, the figures would mix them."""
    span = f"{max(1, math.ceil(t1 - t0))}s"
    by_model = f"count by (model_name) (max_over_time({MODEL_SERIES}{{{scope.matchers()}}}[{span}]))"
    try:
        models = sorted({s.labels.get("model_name", "") for s in source.instant(by_model, t1)})
    except (PrometheusError, ValueError):
        return scope  # the latency queries will say what is wrong with the source
    named = [m for m in models if m]
    if scope.model is None:
        if len(named) > 1:
            raise BaselineError(
                f"namespace {scope.namespace!r} serves {len(named)} models ({', '.join(named)}): a baseline of all "
                "of them is no model's; give the experiment's target.model (or --pod) so the capture keeps to the "
                "target's"
            )
        return scope
    if len(named) <= 1 or scope.pods:
        return scope
    by_pod = f"count by (pod) (max_over_time({MODEL_SERIES}{{{scope.vllm_matchers()}}}[{span}]))"
    try:
        pods = sorted({s.labels["pod"] for s in source.instant(by_pod, t1) if s.labels.get("pod")})
    except (PrometheusError, ValueError):
        return scope
    return Scope(scope.namespace, tuple(pods), model=scope.model) if pods else scope


def _coverage(
    latency: tuple[NDArray[np.float64], NDArray[np.float64]],
    days: int,
    step: float,
    excluded: list[tuple[float, float]],
    series: dict[str, SeriesStat],
    short_history: str | None,
    url: str,
) -> tuple[Coverage, list[str]]:
    """The baseline's coverage from the latency series' own evaluations, and the loud notes it needs. Raises
    BaselineError when the history holds less than asked (more than three steps short) without a reason."""
    times, values = latency
    seen = times[np.isfinite(values)]
    first, last = float(seen.min()), float(seen.max())
    covered = last - first + step
    # Seconds of [first, last] inside the union of the excluded windows.
    excluded_s, reach = 0.0, first
    for low, high in sorted(excluded):
        low, high = max(low, reach), min(high, last + step)
        if high > low:
            excluded_s += high - low
            reach = high
    short = days * 86400.0 - covered > 3 * step
    span = f"{format_time(datetime.fromtimestamp(first, UTC))}..{format_time(datetime.fromtimestamp(last, UTC))}"
    if short and not short_history:
        raise BaselineError(
            f"history from {url} covers {covered / 86400:.2f} of the {days} days asked (latency data {span}); "
            "give capture.short_history (--short-history) with the reason to accept it -- it is recorded in the "
            "baseline and shown in every verdict that uses it -- or capture when the history is there"
        )
    notes = []
    if short_history and (short or days < MIN_DAYS):
        notes.append(
            f"SHORT BASELINE: {covered / 86400:.2f} days of history ({span}; {days} asked, at least {MIN_DAYS} "
            f"is the rule), accepted because: {short_history}"
        )
    coverage = Coverage(
        requested_days=days,
        data_from=format_time(datetime.fromtimestamp(first, UTC)),
        data_to=format_time(datetime.fromtimestamp(last, UTC)),
        covered_days=covered / 86400.0,
        excluded_s=excluded_s,
        kept_intervals=series["latency_p99"].intervals,
        override=short_history if notes else None,
    )
    return coverage, notes


def _oom_kills(
    source: MetricsSource,
    scope: Scope,
    t0: float,
    t1: float,
    step: float,
    excluded: list[tuple[float, float]],
    used: dict[str, str],
    notes: list[str],
) -> float | None:
    """Host OOM kills in the kept intervals, counted as the verdict counts them (kfchaos.metrics.oom: per
    container series, then summed); None without kube-state-metrics. A gap in kube-state-metrics' samples
    (docs/verdict.md, "Freshness") adds a note: kills in it are not in the total."""
    grid_step = max(step, (t1 - t0) / 10_000)  # under Prometheus's 11,000 points per series
    for part, query in oom.queries(scope).items():
        used[f"oom.{part}"] = query
    counted = oom.collect(source, scope, t0, t1, grid_step)
    series = counted.series.get(oom.HOST_OOM)
    if series is None or len(series.times) < 2:
        return None
    interval = getattr(source, "scrape_interval", lambda: None)()
    counted.grace = interval if interval is not None else counted.grace
    gap = counted.stale(oom.HOST_OOM, t0, t1)
    if gap:
        notes.append(f"OOM kills undercounted: {gap}")
    steps = np.diff(series.values)
    keep = kept_intervals(series.times[1:], grid_step, excluded)
    return float(steps[keep].sum())


def _latency_histogram(
    source: MetricsSource, scope: Scope, at: float, p99: float, drift: float, used: dict[str, str]
) -> tuple[LatencyHistogram | None, list[str]]:
    """The latency histogram's bucket bounds, and a warning when they cannot resolve a drift test at
    (1 + drift) x the baseline P99 (the verdict then says INCONCLUSIVE unless a control baseline exists)."""
    query = f"count by (le) (vllm:e2e_request_latency_seconds_bucket{{{scope.vllm_matchers()}}})"
    used["latency_buckets"] = query
    try:
        bounds = sorted({float(s.labels["le"]) for s in source.instant(query, at) if "le" in s.labels})
    except (PrometheusError, ValueError) as exc:
        return None, [f"latency bucket bounds unknown ({exc})"]
    if not bounds:
        return None, [f"latency bucket bounds unknown: {query} found no series"]
    histogram = LatencyHistogram(query=query, bounds=[b for b in bounds if math.isfinite(b)])
    notes = [
        w
        for w in (
            wide_bucket_warning(bounds, p99, drift, what="baseline P99"),
            wide_bucket_warning(bounds, (1 + drift) * p99, drift, what="drift limit"),
        )
        if w
    ]
    return histogram, notes
