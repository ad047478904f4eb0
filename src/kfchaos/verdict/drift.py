"""What a stage's P99 drift is measured against (docs/verdict.md "P99 drift: the reference").

1. A control baseline (`kfchaos baseline control`) at the stage's rate, when the baseline file has one: the
   same client, the same traffic, exact quantiles. Its P99 is itself an estimate, so PASS is judged against
   the low end of its confidence interval and FAIL against the high end (a close call is INCONCLUSIVE).
   The control must sit in production's normal band: a control P99 surely above the Prometheus figures'
   P90 of interval P99s (read up to the top of the bucket holding it) was not a normal run -> INCONCLUSIVE.
2. Otherwise the Prometheus histogram P99 -- only where the histogram can resolve the test: when the bucket
   holding the baseline P99 or the one holding the drift limit (1 + drift) x P99 is wider than the drift
   tested, or the bounds were not recorded, the check is INCONCLUSIVE (interpolation inside one bucket can
   move the P99 by the bucket's width: a true 212 ms read as 297 ms in vLLM's first 0..300 ms bucket).
   And only where its intervals rest on enough requests: each interval's P99 comes from that interval's
   requests alone, and a P99 of 40 requests is their slowest one. The median interval must hold as many as a
   P99 needs to have an order-statistic interval at the verdict's confidence (299 at 95 %), else INCONCLUSIVE,
   saying how many requests it rests on; a baseline that records no counts (captured before kfchaos recorded
   them) cannot say, and is INCONCLUSIVE too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kfchaos.baseline import Baseline
from kfchaos.metrics.histogram import bucket_around, wide_bucket_warning
from kfchaos.verdict.stats import TAIL, quantile_ranks


@dataclass(frozen=True)
class DriftReference:
    p99: float | None  # the reference P99 shown (seconds)
    low: float  # PASS is judged against (1 + drift) x low
    high: float  # FAIL is judged against (1 + drift) x high
    source: str  # "control at 60%", "production histogram"
    problem: str | None = None  # why the drift cannot be judged (INCONCLUSIVE)


def _none(problem: str, p99: float | None = None, source: str = "none") -> DriftReference:
    return DriftReference(p99, math.nan, math.nan, source, problem)


def _band_top(baseline: Baseline) -> float | None:
    """The highest production interval P99 still normal: P90 of the intervals, up to the top of its bucket."""
    stat = baseline.series.get("latency_p99")
    if stat is None or not math.isfinite(stat.p90):
        return None
    if baseline.latency_histogram and baseline.latency_histogram.bounds:
        return bucket_around(baseline.latency_histogram.bounds, stat.p90)[1]
    return stat.p90


def p99_requests(confidence: float) -> int:
    """The fewest requests whose P99 has an order-statistic interval at `confidence` (299 at 95 %)."""
    n = 1
    while quantile_ranks(n, 1 - TAIL, confidence) is None:
        n = n * 2 if n < 128 else n + 1
    return n


def _precision_problem(baseline: Baseline, where: str, confidence: float) -> str | None:
    needed = p99_requests(confidence)
    precision = baseline.precision
    if precision is None:
        return (
            f"{where}: the baseline records no request counts per interval (captured before kfchaos recorded "
            "them): how many requests its P99 rests on is unknown; capture it again or record a control baseline "
            "(kfchaos baseline control)"
        )
    if precision.requests_median < needed:
        return (
            f"{where}: the baseline P99 rests on intervals of {precision.requests_median:.0f} requests (the median "
            f"of {precision.intervals} {precision.step:g}s intervals, {precision.requests_total:.0f} requests in "
            f"all; the sparsest {precision.requests_min:.0f}): an interval's P99 needs at least {needed} requests "
            f"to be known at {100 * confidence:g}% confidence, so its drift can be neither shown nor ruled out; "
            "capture with a longer step or record a control baseline (kfchaos baseline control)"
        )
    return None


def reference(baseline: Baseline | None, stage: int, drift: float, confidence: float = 0.95) -> DriftReference:
    if baseline is None:
        return _none("no baseline P99 for latency: no baseline, nothing to compare with")
    control = baseline.control.stage(stage) if baseline.control else None
    if baseline.control is not None and control is not None:
        where = f"control baseline at {stage}%"
        if control.latency_p99 is None or not control.latency_p99_interval:
            return _none(
                f"{where} has {control.samples} latency samples: too few for a P99 interval; capture it longer",
                control.latency_p99,
                where,
            )
        low, high = control.latency_p99_interval
        top = _band_top(baseline)
        if top is not None and math.isfinite(top) and low > top:
            return _none(
                f"{where}: P99 {low:.4g}s or more is above production's normal band (interval P99s up to "
                f"{top:.4g}s over {baseline.provenance.window.start}..{baseline.provenance.window.end}): the "
                "control run was not normal; capture it again",
                control.latency_p99,
                where,
            )
        return DriftReference(control.latency_p99, low, high, where)
    where = "production histogram P99"
    p99 = baseline.p99("latency_p99")
    if p99 is None or not math.isfinite(p99) or p99 <= 0:
        return _none("no baseline P99 for latency: nothing to compare with")
    if baseline.control is not None:
        where += f" (the control baseline has no {stage}% stage)"
    if baseline.latency_histogram is None or not baseline.latency_histogram.bounds:
        return _none(
            f"{where}: the baseline records no latency bucket bounds, so whether the histogram resolves a "
            f"{100 * drift:g}% drift is unknown; capture it again or record a control baseline "
            "(kfchaos baseline control)",
            p99,
            where,
        )
    bounds = [*baseline.latency_histogram.bounds, math.inf]
    for value, what in ((p99, "baseline P99"), ((1 + drift) * p99, "drift limit")):
        problem = wide_bucket_warning(bounds, value, drift, what=what)
        if problem:
            return _none(f"{where}: {problem}", p99, where)
    imprecise = _precision_problem(baseline, where, confidence)
    if imprecise:
        return _none(imprecise, p99, where)
    return DriftReference(p99, p99, p99, where)
