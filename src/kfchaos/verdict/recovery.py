"""Recovery time: after the faults are removed, how long until the SLOs hold again (MTTR, from the records).

The records after removal are cut into windows starting at the removal time. A window holds when it has
at least MIN_WINDOW_REQUESTS requests and its error rate, timeout rate and P99 are within the SLOs (point
values: a window is short, this is a timeline, not a test). Recovery time = start of the first window of
the final run of holding windows - removal time; if the last window does not hold, the service did not
recover while observed.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from kfchaos.spec import Slo
from kfchaos.verdict.model import Check, StageResult, Status
from kfchaos.verdict.requests import Requests
from kfchaos.verdict.windows import windows

RECOVERY_WINDOW = 10.0
MIN_WINDOW_REQUESTS = 20  # fewer requests in a window say nothing about it (e.g. the last, partial one)


def removal_time(requests: Requests) -> float | None:
    """When faults ended, inferred from the records: the last send with a fault active, if any came after it."""
    active = requests.fault_active
    if not active.any():
        return None
    last_active = float(requests.intended[active].max())
    after = ~active & (requests.intended > last_active)
    return last_active if after.any() else None


def latency_limit(slo: Slo, baseline_p99: float | None) -> float:
    limits = [slo.p99_max] if slo.p99_max is not None else []
    if baseline_p99 is not None and baseline_p99 > 0:
        limits.append((1.0 + slo.p99_drift_max) * baseline_p99)
    return min(limits) if limits else math.inf


def recovery_check(
    requests: Requests,
    slo: Slo,
    baseline_p99: float | None,
    *,
    removed_at: float | None = None,
    width: float = RECOVERY_WINDOW,
) -> Check | None:
    """None when there is nothing to report (no faults ended and no recovery limit is set)."""
    name = "recovery"
    limit_s = slo.recovery_max
    gating = limit_s is not None
    at = removed_at if removed_at is not None else removal_time(requests)
    if at is None:
        if not gating:
            return None
        return Check(name, Status.INCONCLUSIVE, "no records after the faults were removed", threshold=limit_s, unit="s")
    after = requests.where(requests.intended >= at)
    if not len(after):
        return Check(
            name,
            Status.INCONCLUSIVE,
            "no records after the faults were removed",
            threshold=limit_s,
            unit="s",
            gating=gating,
        )
    grid = windows(after, width, start=at)
    latency_max = latency_limit(slo, baseline_p99)
    measured = grid.sent >= MIN_WINDOW_REQUESTS
    with np.errstate(invalid="ignore"):
        holds = (
            measured
            & (grid.error_rate() <= slo.error_rate_max)
            & (grid.timeout_rate() <= slo.timeout_rate_max)
            & (grid.p99_at_most <= latency_max)  # a request still unanswered is not recovered
        )
    observed = float(len(grid) * width)
    indices = np.nonzero(measured)[0]
    if not len(indices):
        reason = f"fewer than {MIN_WINDOW_REQUESTS} requests in every {width:g}s window after removal"
        return Check(name, Status.INCONCLUSIVE, reason, None, limit_s, None, int(grid.sent.sum()), "s", gating)
    details = {"removed_at": at, "window": width, "windows": len(grid), "latency_limit": latency_max}
    if not holds[indices[-1]]:
        reason = f"SLOs did not hold again within the {observed:g}s observed after removal"
        status = Status.FAIL if gating and limit_s is not None and observed > limit_s else Status.INCONCLUSIVE
        return Check(name, status, reason, None, limit_s, None, int(grid.sent.sum()), "s", gating, details)
    failing = indices[~holds[indices]]
    first_good = int(indices[indices > failing[-1]][0]) if len(failing) else int(indices[0])
    seconds = first_good * width
    interval = (max(0.0, seconds - width), seconds)  # the true moment lies within one window of the estimate
    details["holding_since"] = at + seconds
    if not gating:
        return Check(
            name,
            Status.PASS,
            f"SLOs held again {seconds:g}s after removal (no recovery_max set)",
            seconds,
            None,
            interval,
            int(grid.sent.sum()),
            "s",
            False,
            details,
        )
    assert limit_s is not None
    status = Status.PASS if seconds <= limit_s else Status.FAIL
    reason = f"SLOs held again {seconds:g}s after removal vs recovery_max {limit_s:g}s"
    return Check(name, status, reason, seconds, limit_s, interval, int(grid.sent.sum()), "s", True, details)


def within_valid_replay(check: Check | None, requests: Requests, stages: list[StageResult]) -> Check | None:
    """A recovery measured from records is only as good as their replay: when a stage whose requests were sent after
    the removal has a replay that fell behind (its `replay` check not PASS), the windows after removal held the
    replayer's delays too, and neither a FAIL nor a PASS of recovery can be told from them: INCONCLUSIVE, as the
    stage itself is. (A pipeline run judges recovery on its probe after removal, never on such a stage; re-judging
    its folder must not turn the stage's INCONCLUSIVE into a FAIL.)"""
    if check is None or check.status is Status.INCONCLUSIVE or not check.details.get("removed_at"):
        return check
    after = {int(s) for s in np.unique(requests.stage[requests.intended >= float(check.details["removed_at"])])}
    invalid = [
        f"stage {stage.stage}%: {replay.reason}"
        for stage in stages
        if stage.stage in after
        for replay in stage.checks
        if replay.name == "replay" and replay.status is not Status.PASS
    ]
    if not invalid:
        return check
    reason = f"not judged: the replay after removal was not valid ({'; '.join(invalid)})"
    return replace(check, status=Status.INCONCLUSIVE, reason=reason, value=None, interval=None)


def recorded_check(data: dict[str, Any]) -> Check:
    """The recovery check as the pipeline's recovery probe measured it (a Check's to_dict from the run state),
    for a run folder whose records end before the faults were removed: the probe's own records are not in the
    folder, so the figure is carried, not recomputed, and the reason says so."""
    status = Status(str(data.get("status")))
    interval = data.get("interval")
    samples = data.get("samples")
    details = data.get("details")
    return Check(
        "recovery",
        status,
        f"{data.get('reason', '')} (the pipeline's recovery probe; its records are not in the run folder)",
        _number(data.get("value")),
        _number(data.get("threshold")),
        (float(interval[0]), float(interval[1])) if interval is not None and _pair(interval) else None,
        samples if isinstance(samples, int) and not isinstance(samples, bool) else 0,
        str(data.get("unit") or "s"),
        bool(data.get("gating", True)),
        {"recorded": True, **(details if isinstance(details, dict) else {})},
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(_number(v) is not None for v in value)
