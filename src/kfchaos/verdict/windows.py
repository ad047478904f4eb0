"""Requests bucketed into fixed time windows by intended send time, with per-window counts and P99s.

Used by the abort rules (a stage gate) and by recovery time. One sort per call, no Python loop over
requests: windows are integer bins, counts come from bincount.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from kfchaos.verdict.requests import Requests
from kfchaos.verdict.stats import TAIL


@dataclass
class Windows:
    start: float  # time of window 0
    width: float
    sent: NDArray[np.int64]
    failed: NDArray[np.int64]
    timeouts: NDArray[np.int64]
    # (window index, value) of the latency and TTFT samples; the P99s are computed only when asked for,
    # because the per-window sort is the one costly step. An unknown request is in them at its floor (the time a
    # request cut in flight waited, else 0: Requests.latency_floor), so a value shown above a threshold is above it.
    latency_sample: tuple[NDArray[np.int64], NDArray[np.float64]]
    ttft_sample: tuple[NDArray[np.int64], NDArray[np.float64]]
    # The latency sample with every unknown request as +inf: the most its P99 can be.
    latency_ceiling: tuple[NDArray[np.int64], NDArray[np.float64]]

    @cached_property
    def p99(self) -> NDArray[np.float64]:
        """Latency P99 per window (timeouts count as +inf, unknown requests at their floor: the least it can be);
        NaN in an empty window."""
        return grouped_p99(*self.latency_sample, len(self.sent))

    @cached_property
    def p99_at_most(self) -> NDArray[np.float64]:
        """Latency P99 per window with every unknown request as +inf: the most it can be (what "holds" needs)."""
        return grouped_p99(*self.latency_ceiling, len(self.sent))

    @cached_property
    def ttft_p99(self) -> NDArray[np.float64]:
        return grouped_p99(*self.ttft_sample, len(self.sent))

    def __len__(self) -> int:
        return len(self.sent)

    def bounds(self, index: int) -> tuple[float, float]:
        return (self.start + index * self.width, self.start + (index + 1) * self.width)

    def error_rate(self) -> NDArray[np.float64]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.sent > 0, self.failed / np.maximum(self.sent, 1), np.nan)

    def timeout_rate(self) -> NDArray[np.float64]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.sent > 0, self.timeouts / np.maximum(self.sent, 1), np.nan)


def grouped_p99(bins: NDArray[np.int64], values: NDArray[np.float64], count: int) -> NDArray[np.float64]:
    """Empirical P99 (inverted CDF) of `values` in each bin 0..count-1, NaN where a bin is empty.

    Records come in time order, so the bins are usually sorted already and grouping costs one check; each
    bin's P99 is then one partition of its slice, O(n) overall instead of a full sort.
    """
    out = np.full(count, np.nan)
    if not len(values):
        return out
    if len(bins) > 1 and not bool(np.all(bins[1:] >= bins[:-1])):
        order = np.argsort(bins, kind="stable")
        bins, values = bins[order], values[order]
    sizes = np.bincount(bins, minlength=count)
    ends = np.cumsum(sizes)
    for index in np.nonzero(sizes)[0].tolist():  # one entry per window: a few hundred at most
        size = int(sizes[index])
        segment = values[ends[index] - size : ends[index]]
        rank = max(1, math.ceil((1.0 - TAIL) * size - 1e-9)) - 1
        out[index] = np.partition(segment, rank)[rank]
    return out


def windows(requests: Requests, width: float, start: float | None = None) -> Windows:
    if width <= 0 or not math.isfinite(width):
        raise ValueError(f"window width must be positive, got {width}")
    sent = requests.counted()  # the one accounting (kfchaos.verdict.requests): dropped and cancelled included
    times = requests.intended
    origin = float(times.min()) if start is None and len(times) else (start or 0.0)
    index = np.floor((times - origin) / width).astype(np.int64)
    keep = sent & (index >= 0)
    count = int(index[keep].max()) + 1 if keep.any() else 0
    failed = requests.failed() & keep
    timeouts = requests.timed_out() & keep
    ok = requests.succeeded() & keep & np.isfinite(requests.latency)
    unknown = requests.unknown()
    latency_floor = np.zeros(len(requests))
    latency_floor[unknown] = requests.latency_floor()
    ttft_floor = np.zeros(len(requests))
    ttft_floor[unknown] = requests.ttft_floor()
    unknown = unknown & keep
    # Latency sample: successful responses, with timeouts as +inf (slower than any limit below the timeout) and
    # unknown requests at their floor.
    lat_mask = ok | timeouts | unknown
    latency = np.where(timeouts, np.inf, np.where(unknown, latency_floor, requests.latency))
    ceiling = np.where(unknown, np.inf, latency)[lat_mask]
    latency = latency[lat_mask]
    ttft_mask = (requests.succeeded() & keep & np.isfinite(requests.ttft)) | timeouts | unknown
    ttft = np.where(timeouts, np.inf, np.where(unknown, ttft_floor, requests.ttft))[ttft_mask]
    return Windows(
        start=origin,
        width=width,
        sent=np.bincount(index[keep], minlength=count),
        failed=np.bincount(index[failed], minlength=count),
        timeouts=np.bincount(index[timeouts], minlength=count),
        latency_sample=(index[lat_mask], latency),
        ttft_sample=(index[ttft_mask], ttft),
        latency_ceiling=(index[lat_mask], ceiling),
    )
