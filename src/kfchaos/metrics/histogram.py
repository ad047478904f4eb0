"""Quantiles from cumulative histogram buckets, the way Prometheus's histogram_quantile computes them, and
the warning a threshold deserves when it falls inside a wide bucket.

Interpolation is linear inside the bucket, so the answer is only known to lie within that bucket: a 15 %
drift test over vLLM's default 2.5 s -> 5 s bucket (100 % wide) cannot be decided from the histogram.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def quantile_from_buckets(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float:
    """histogram_quantile(q, ...) for one histogram: `bounds` are the `le` values (ascending, ending in +Inf),
    `cumulative` the counts at or below each. NaN where Prometheus gives NaN."""
    if len(bounds) != len(cumulative):
        raise ValueError("bounds and counts differ in length")
    if len(bounds) < 2 or not math.isinf(bounds[-1]) or cumulative[-1] <= 0 or not 0 <= q <= 1:
        return math.nan
    rank = q * cumulative[-1]
    index = next(i for i, c in enumerate(cumulative) if c >= rank)
    if index == len(bounds) - 1:
        return bounds[-2]  # in the +Inf bucket: the highest finite bound is all Prometheus can say
    lower = 0.0 if index == 0 else bounds[index - 1]
    below = 0.0 if index == 0 else cumulative[index - 1]
    if index == 0 and bounds[0] <= 0:
        return bounds[0]
    in_bucket = cumulative[index] - below
    if in_bucket <= 0:
        return bounds[index]
    return lower + (bounds[index] - lower) * (rank - below) / in_bucket


def bucket_around(bounds: Sequence[float], value: float) -> tuple[float, float]:
    """The bucket (lower, upper] holding `value`; the lowest bucket starts at 0 as Prometheus assumes."""
    lower = 0.0
    for upper in bounds:
        if value <= upper:
            return (lower, upper)
        lower = upper
    return (lower, math.inf)


def wide_bucket_warning(
    bounds: Sequence[float], threshold: float, tolerance: float, what: str = "threshold"
) -> str | None:
    """A warning when a `threshold` decision from these buckets could be off by more than `tolerance`
    (relative): the bucket around it is wider than that, or it lies beyond the last finite bucket."""
    finite = sorted(b for b in bounds if math.isfinite(b))
    if not finite:
        return f"no finite buckets: the {what} {threshold:g}s cannot be located"
    lower, upper = bucket_around(finite, threshold)
    if math.isinf(upper):
        return (
            f"the {what} {threshold:g}s is beyond the last finite bucket ({finite[-1]:g}s): histogram_quantile "
            "caps there, so drift above it is invisible; add buckets or record a control baseline "
            "(kfchaos baseline control)"
        )
    width = (upper - lower) / threshold
    if width > tolerance and threshold not in finite:
        return (
            f"the {what} {threshold:g}s falls inside the bucket {lower:g}..{upper:g}s ({100 * width:.0f}% wide, more "
            f"than the {100 * tolerance:g}% being tested): interpolation cannot resolve it; add a bucket boundary "
            "at the threshold (vLLM --custom-histogram-buckets) or record a control baseline (kfchaos baseline control)"
        )
    return None
