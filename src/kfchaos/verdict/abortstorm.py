"""After a client abort storm the server must give back what the aborted requests held (no leaked KV blocks).

vLLM frees an aborted request's blocks (kfchaos.demo.server.disconnect cites the path); when it does not -- the KV
leaks of vllm-project/vllm#46283 and #29906 -- usage stays up after the clients are gone and the cache runs out
requests later. The check compares the floor (minimum) of `vllm:kv_cache_usage_perc` and
`vllm:num_requests_running` before the storm with their floor after it has settled: a leak raises the floor
for good, while traffic only moves the level up and down. Before: the samples in the PRE_WINDOW seconds up to
the storm's first request. After: from the storm's end (its last request's end, plus SETTLE seconds or two
scrape intervals, whichever is longer) to the end of the series, which runs past the stage's drain. Either
side without samples, or a series absent, is INCONCLUSIVE.

KV-cache usage is read from its floor series (kfchaos.metrics.names.KV_CACHE_FLOOR): each point is the lowest
sample in its own step (min_over_time over the step, kfchaos.metrics.catalog), so a point at t covers
(t - step, t]. A point counts as "after" only when its whole step lies after the storm settled, and as
"before" only when it ends before the storm began: a step that straddles the storm could carry the pre-storm
floor into "after" and hide a leak. The snapshot's KV_CACHE_USAGE is the step's *peak* (for the chart), whose
minimum is no floor at all: a storm's peak stays in its one-minute range long after the blocks are freed.
"""

from __future__ import annotations

import numpy as np

from kfchaos.metrics import names
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import Requests

NAME = "abort_recovery"
PRE_WINDOW = 120.0  # seconds of samples before the storm that give its floor
SETTLE = 5.0  # seconds after the storm's last request ended before its blocks must be back
KV_TOLERANCE = 0.02  # share of the KV cache the floor may rise (block rounding, prefix-cache blocks in use)
RUNNING_TOLERANCE = 0.0  # requests: a leaked running request is a whole one


def storm_span(storm: Requests) -> tuple[float, float] | None:
    """(first intended send, last end) of the storm's requests; an aborted one ends no earlier than its first
    token (sent + ttft), a finished one at sent + latency, one never answered at its intended time."""
    if not len(storm):
        return None
    end = np.where(np.isfinite(storm.latency), storm.sent + storm.latency, np.nan)
    end = np.where(np.isnan(end) & np.isfinite(storm.ttft), storm.sent + storm.ttft, end)
    end = np.where(np.isnan(end), storm.intended, end)
    return float(storm.intended.min()), float(np.nanmax(end))


def abort_recovery_check(storm: Requests, metrics: MetricsSnapshot | None, *, settle: float = SETTLE) -> Check:
    span = storm_span(storm)
    if span is None:
        return Check(NAME, Status.INCONCLUSIVE, "no client-abort-storm requests in the records")
    if metrics is None:
        return Check(NAME, Status.INCONCLUSIVE, "no metrics given: KV-cache release after the storm unknown")
    start, end = span
    settled = end + max(settle, 2 * metrics.grace)
    floors: dict[str, tuple[float, float]] = {}
    for series, label, tolerance, what, per_step in (
        (names.KV_CACHE_FLOOR, names.KV_CACHE_USAGE, KV_TOLERANCE, "KV-cache usage", True),
        (names.REQUESTS_RUNNING, names.REQUESTS_RUNNING, RUNNING_TOLERANCE, "running requests", False),
    ):
        missing = metrics.missing(series)
        if missing:
            return Check(NAME, Status.INCONCLUSIVE, f"{what} unknown: {missing}")
        s = metrics.series[series]
        if per_step and s.step <= 0:
            return Check(NAME, Status.INCONCLUSIVE, f"{what}: one point, so the step it stands for is unknown")
        ok = np.isfinite(s.values)
        covered_from = s.times - s.step if per_step else s.times  # a floor point stands for its whole step
        before = s.values[ok & (s.times >= start - PRE_WINDOW) & (s.times < start)]
        after = s.values[ok & (covered_from >= settled)]
        if not len(before):
            return Check(NAME, Status.INCONCLUSIVE, f"no {what} samples in the {PRE_WINDOW:g}s before the storm")
        if not len(after):
            return Check(NAME, Status.INCONCLUSIVE, f"no {what} samples after the storm settled (t >= {settled:.0f})")
        low_before, low_after = float(before.min()), float(after.min())
        floors[label] = (low_before, low_after)
        if low_after > low_before + tolerance:
            reason = (
                f"{what} did not return to its pre-storm level: floor {low_after:.4g} after the storm vs "
                f"{low_before:.4g} before (tolerance {tolerance:g}); aborted requests kept what they held"
            )
            return Check(NAME, Status.FAIL, reason, low_after - low_before, tolerance, samples=len(after),
                         details=_details(floors, span, settled))  # fmt: skip
    kv_before, kv_after = floors[names.KV_CACHE_USAGE]
    run_before, run_after = floors[names.REQUESTS_RUNNING]
    reason = (
        f"KV-cache usage back to {kv_after:.4g} (before the storm {kv_before:.4g}), running requests back to "
        f"{run_after:g} (before {run_before:g}): the aborted requests' blocks were freed"
    )
    return Check(NAME, Status.PASS, reason, kv_after - kv_before, KV_TOLERANCE, samples=len(storm),
                 details=_details(floors, span, settled))  # fmt: skip


def _details(floors: dict[str, tuple[float, float]], span: tuple[float, float], settled: float) -> dict[str, object]:
    return {
        "storm": list(span),
        "settled_from": settled,
        **{f"{name}_floor": {"before": b, "after": a} for name, (b, a) in floors.items()},
    }
