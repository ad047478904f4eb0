"""Stage gate: the experiment's abort rules, each over fixed time windows, plus replay validity.

A rule trips when its metric is shown above the threshold in `consecutive` windows in a row. The ramp goes on
only when the gate clearly passed: a tripped rule FAILs, and a rule that cannot be evaluated (its series is
missing, Prometheus is unreachable) is INCONCLUSIVE, which also stops the ramp -- blind is not safe.

Shown, for the rules on requests (docs/verdict-statistics.md, "Abort rules"): a window of a few dozen requests is
a small sample, and a run has hundreds of windows. The empirical P99 of 50 requests is their slowest one, and
two errors of 30 are 6.7 %: over a run's windows such blips come by chance to a target well inside its limits,
and a rule read on the raw window values invents a FAIL from multiple comparisons. So a window counts as above
only where its own requests show it: the Clopper-Pearson lower bound of its error (or timeout) share above the
threshold, or of its share of latencies above the threshold above 1 % (a P99 above it), one-sided at the
verdict's confidence divided among the run's windows of that rule (Bonferroni: the windows measured in the stage
times the planned stages). A window above on its own counts but not shown is reported, and trips nothing: the
stage's own checks judge the whole stage. Counts of events (OOM kills) and gauges (dependency P99) are read as
they are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from kfchaos.metrics import oom
from kfchaos.metrics.names import DEPENDENCY_PREFIX
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.spec import AbortRule
from kfchaos.verdict.checks import replay_check
from kfchaos.verdict.model import Check, GateResult, Status, status_of
from kfchaos.verdict.requests import DROPPED, Requests, from_table
from kfchaos.verdict.stats import TAIL, lower_bounds
from kfchaos.verdict.windows import Windows, windows


def _longest_run(above: NDArray[np.bool_]) -> tuple[int, int]:
    """Length of the longest run of True and the index where it ends."""
    best, best_end, run = 0, -1, 0
    for index, flag in enumerate(above.tolist()):  # one entry per window: a few hundred at most
        run = run + 1 if flag else 0
        if run > best:
            best, best_end = run, index
    return best, best_end


def _series_per_window(
    snapshot: MetricsSnapshot, names: list[str], grid: Windows, counter: bool
) -> NDArray[np.float64]:
    values = np.full(len(grid), np.nan)
    for index in range(len(grid)):
        start, end = grid.bounds(index)
        found = [
            snapshot.series[n].increase(start, end) if counter else snapshot.series[n].max_between(start, end)
            for n in names
        ]
        present = [v for v in found if v is not None]
        if present:
            values[index] = sum(present) if counter else max(present)
    return values


def _oom_per_window(snapshot: MetricsSnapshot, grid: Windows) -> NDArray[np.float64]:
    """OOM events shown in each window (host kills + GPU OOM crashes, kfchaos.metrics.oom). No grace here:
    each event falls in exactly one window, so one kill cannot trip `consecutive` windows on its own."""
    values = np.full(len(grid), np.nan)
    for index in range(len(grid)):
        counted = oom.count(snapshot, *grid.bounds(index), grace=0.0)
        if counted.host is not None or counted.cadvisor is not None:
            values[index] = counted.known
    return values


def _rule_values(
    rule: AbortRule, grid: Windows, metrics: MetricsSnapshot | None
) -> tuple[NDArray[np.float64] | None, str | None]:
    """Per-window value of the rule's metric, or why it cannot be had."""
    if rule.metric == "error_rate":
        return grid.error_rate(), None
    if rule.metric == "timeout_rate":
        return grid.timeout_rate(), None
    if rule.metric == "p99_latency":
        return grid.p99, None
    if rule.metric == "ttft_p99":
        return grid.ttft_p99, None
    snapshot = metrics or MetricsSnapshot()
    if rule.metric == "oom_kills":
        why = snapshot.missing(oom.HOST_OOM)
        return (None, why) if why else (_oom_per_window(snapshot, grid), None)
    # dependency_p99: one gauge per dependency, named dependency_p99:<name>
    if rule.dependency == "any":
        names = sorted(n for n in snapshot.series if n.startswith(DEPENDENCY_PREFIX))
        if not names:
            return None, snapshot.missing(f"{DEPENDENCY_PREFIX}*") or "no dependency_p99:* series in the metrics"
    else:
        names = [f"{DEPENDENCY_PREFIX}{rule.dependency}"]
        why = snapshot.missing(names[0])
        if why:
            return None, why
    return _series_per_window(snapshot, names, grid, counter=False), None


def _stale(rule: AbortRule, grid: Windows, metrics: MetricsSnapshot | None) -> str | None:
    """Why the rule's metric series went unsampled for a while inside the stage (kfchaos.metrics.snapshot,
    freshness), or None: a rule that did not trip over such a gap cannot say it would not have."""
    if metrics is None or not len(grid) or rule.metric not in ("oom_kills", "dependency_p99"):
        return None
    start, end = grid.start, grid.bounds(len(grid) - 1)[1]
    if rule.metric == "oom_kills":
        names = [oom.HOST_OOM]
    elif rule.dependency == "any":
        names = sorted(n for n in metrics.series if n.startswith(DEPENDENCY_PREFIX))
    else:
        names = [f"{DEPENDENCY_PREFIX}{rule.dependency}"]
    grace = metrics.grace if rule.metric == "oom_kills" else 0.0
    found = (metrics.stale(n, start, end + grace) for n in names if not metrics.missing(n))
    return next((why for why in found if why), None)


def _shown(
    rule: AbortRule, grid: Windows, observed: NDArray[np.bool_], comparisons: int, confidence: float
) -> tuple[NDArray[np.bool_], float | None]:
    """Which windows' own requests show the rule's threshold crossed (see the module's docstring), and the
    one-sided level each was held to (None: a count or gauge rule, read as it is)."""
    if rule.metric in ("error_rate", "timeout_rate"):
        events = grid.failed if rule.metric == "error_rate" else grid.timeouts
        share, trials = rule.threshold, grid.sent
    elif rule.metric in ("p99_latency", "ttft_p99"):
        bins, values = grid.latency_sample if rule.metric == "p99_latency" else grid.ttft_sample
        events = np.bincount(bins[values > rule.threshold], minlength=len(grid))
        trials = np.bincount(bins, minlength=len(grid))
        share = TAIL
    else:
        return observed, None
    level = (1.0 - confidence) / 2 / max(1, comparisons)
    low = lower_bounds(events.astype(np.int64), trials.astype(np.int64), level)
    return observed & (low > share), level


def rule_check(
    rule: AbortRule, requests: Requests, metrics: MetricsSnapshot | None, stages: int = 1, confidence: float = 0.95
) -> Check:
    """`stages`: how many stages the run has (the rule's windows are compared over all of them); `confidence`:
    the verdict's."""
    name = f"abort.{rule.metric}" + (f".{rule.dependency}" if rule.dependency else "")
    threshold = rule.threshold
    grid = windows(requests, rule.window)
    values, why = _rule_values(rule, grid, metrics)
    base = {"window": rule.window, "consecutive": rule.consecutive}
    if values is None:
        return Check(name, Status.INCONCLUSIVE, why or "no data", threshold=threshold, details=base)
    measured = np.isfinite(values)
    if not measured.any():
        return Check(name, Status.INCONCLUSIVE, "no window had data", threshold=threshold, details=base)
    observed = measured & (values > threshold)
    comparisons = int(measured.sum()) * max(1, stages)
    above, level = _shown(rule, grid, observed, comparisons, confidence)
    run, end = _longest_run(above)
    worst = float(np.nanmax(values))
    details = {**base, "windows": len(grid), "windows_measured": int(measured.sum()), "longest_run_above": run}
    shown = ""
    if level is not None:
        details |= {"windows_above_observed": int(observed.sum()), "windows_above_shown": int(above.sum()),
                    "comparisons": comparisons, "one_sided_level": level}  # fmt: skip
        shown = f", shown by each window's requests (lower bound at {100 * confidence:g}% over {comparisons} windows)"
    if run >= rule.consecutive:
        start_index = end - rule.consecutive + 1
        tripped_at = grid.bounds(end)[1]
        details |= {"tripped_at": tripped_at, "first_window_start": grid.bounds(start_index)[0]}
        reason = (
            f"above {rule.above} in {run} consecutive {rule.window:g}s window(s) (rule: {rule.consecutive}){shown}; "
            f"worst {worst:.4g}"
        )
        return Check(name, Status.FAIL, reason, worst, threshold, None, int(grid.sent.sum()), details=details)
    reason = f"never above {rule.above} in {rule.consecutive} consecutive {rule.window:g}s window(s); worst {worst:.4g}"
    unshown = int((observed & ~above).sum())
    if level is not None and unshown:
        reason += (
            f"; {unshown} window(s) above on their own counts, too few requests to show it at "
            f"{100 * confidence:g}% over the run's {comparisons} windows (a blip, not a breach: the stage's own "
            "checks judge the stage)"
        )
    stale = _stale(rule, grid, metrics)
    if stale:
        reason = f"{reason}, but {stale}"
        return Check(name, Status.INCONCLUSIVE, reason, worst, threshold, None, int(grid.sent.sum()), details=details)
    return Check(name, Status.PASS, reason, worst, threshold, None, int(grid.sent.sum()), details=details)


def gate(
    stage_records: pa.Table | Requests,
    rules: Sequence[AbortRule],
    *,
    metrics: MetricsSnapshot | None = None,
    max_send_lag_p99: float = 0.050,
    replay_valid: bool | str | None = None,
    stage: int | None = None,
    stages: int = 1,
    confidence: float = 0.95,
) -> GateResult:
    """Decide whether the ramp may go on after this stage's records (one stage: filter before calling).
    `stages`: the run's planned stages (the abort windows are compared over all of them)."""
    requests = stage_records if isinstance(stage_records, Requests) else from_table(stage_records)
    # Requests a traffic-side fault sent are the fault (kfchaos.verdict.evaluate leaves them out of the SLOs too).
    requests = requests.where(~requests.injected)
    checks = [rule_check(rule, requests, metrics, stages, confidence) for rule in rules]
    sent = requests.was_sent()
    ok = requests.succeeded() & np.isfinite(requests.latency)
    latency_p50 = float(np.median(requests.latency[ok])) if ok.any() else None
    checks.append(
        replay_check(
            np.where(sent, requests.sent - requests.intended, np.nan),
            int(np.count_nonzero(requests.failed() & (requests.error == DROPPED))),
            len(requests),
            max_send_lag_p99,
            replay_valid,
            latency_p50=latency_p50,
        )
    )
    return GateResult(stage, status_of(checks), checks)
