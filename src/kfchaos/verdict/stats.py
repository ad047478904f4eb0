"""Distribution-free intervals the verdict decides with.

Tail latency from a few thousand requests is noisy: at n = 3000 a 95 % interval for the P99 spans roughly
p98.6..p99.4, which for a lognormal tail is -12 %..+18 % in latency. So a P99 check never compares two point
estimates; it counts the requests beyond a threshold and puts an exact binomial (Clopper-Pearson) interval
on that share. No assumption about the latency distribution is needed, only that requests are exchangeable.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import stats

TAIL = 0.01
"""A P99 is the value with 1 % of requests above it: the share a P99 threshold is compared with."""


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """Exact two-sided binomial interval for successes/trials; (0, 1) when there are no trials."""
    if trials <= 0:
        return (0.0, 1.0)
    alpha = 1.0 - confidence
    low = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = 1.0 if successes >= trials else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return (low, high)


def lower_bounds(events: NDArray[np.int64], trials: NDArray[np.int64], level: float) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson lower bounds of events/trials at `level` (the lower tail), element-wise; 0 where
    there are no events or no trials."""
    low = np.zeros(len(events))
    some = (events > 0) & (trials > 0)
    if some.any():
        k, n = events[some], trials[some]
        low[some] = stats.beta.ppf(level, k, n - k + 1)
    return low


def quantile_ranks(n: int, q: float, confidence: float) -> tuple[int, int] | None:
    """1-based ranks (l, u) of the order statistics bracketing the q-quantile with at least `confidence`.

    Chosen from Binomial(n, q) as in `scipy.stats.quantile_test(...).confidence_interval()`; None when n is
    too small for a two-sided interval (for a P99 at 95 % that is n < 299: the sample maximum is not yet an
    upper bound).
    """
    if n <= 0:
        return None
    alpha = 1.0 - confidence
    binom = stats.binom(n, q)
    low = int(binom.ppf(alpha / 2))  # P(B <= low-1) <= alpha/2 -> X(low) is a lower bound
    high = int(binom.isf(alpha / 2)) + 1  # P(B >= high) <= alpha/2 -> X(high) is an upper bound
    if low < 1 or high > n:
        return None
    return (low, high)


def order_statistics(values: NDArray[np.float64], ranks: tuple[int, ...]) -> list[float]:
    """The values at the given 1-based ranks, in O(n) with one partition instead of a full sort."""
    if not ranks:
        return []
    index = [r - 1 for r in ranks]
    part = np.partition(values, index)
    return [float(part[i]) for i in index]


def empirical_quantile_rank(n: int, q: float) -> int:
    """1-based rank of the empirical q-quantile (inverted CDF: the smallest value with >= q of the sample at or
    below it), the definition the exceedance test is the dual of."""
    return max(1, math.ceil(q * n - 1e-9))
