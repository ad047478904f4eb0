"""Whose clock: does the metrics snapshot hold the run the records describe? (docs/verdict.md, "Whose clock")

Every window the verdict reads from Prometheus (OOM kills per stage, abort rules) is cut from the records' times,
on the replayer's clock. A replayer whose clock is off from Prometheus's, or a snapshot taken over another
window, reads the series at the wrong times: a kill during the run falls outside every window, and the stage
PASSes on a quiet stretch of someone else's time. Two cross-checks, one `metrics_window` check per stage:

- the skew the collector measured (Prometheus's `time()` against its clock, kfchaos.metrics.served): more than
  the scrape interval the windows allow (beyond its uncertainty) -> INCONCLUSIVE, saying by how much;
- the server's own count of finished requests over the run's window (the snapshot's `server_requests`) against
  the records' completions, the fault's own requests included (the server finished those too): a server that
  finished fewer than the records say it answered, by more than WINDOW_TOLERANCE, was not watched over this run
  -> INCONCLUSIVE. More is fine (other clients, the probes before and after). Where the server's counter restarted
  in the window (its process ended: vLLM's API server exits after its engine is OOM-killed), what it counted after
  its last scrape died with it: the records' completions between that scrape and the next are not held against it,
  and the check says so.
Without a server counter (not vLLM, a plain HTTP target) the second is not made, and the check says so.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from numpy.typing import NDArray

from kfchaos.metrics import names
from kfchaos.metrics.served import COUNTER
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import Requests

WINDOW_TOLERANCE = 0.10  # the server may count this share fewer finished requests than the records' completions
MIN_SKEW_S = 1.0  # a skew within this (or the scrape interval, if longer) is within the windows' grace
# A busy Prometheus scrapes late: the server's count is read up to this many scrape intervals (at least MIN_LATE_S)
# past the last response. Counting the next requests too only adds to it; a shortfall is what the check reads.
LATE_SCRAPES = 3
MIN_LATE_S = 10.0


def metrics_window_check(requests: Requests, stage: NDArray[np.bool_], metrics: MetricsSnapshot | None) -> Check | None:
    """The check for the rows of `stage` (a mask: no copy of the stage's columns); None without metrics, or when
    the source was unreachable (the metrics_source check says so)."""
    if metrics is None or metrics.unreachable or not stage.any():
        return None
    name = "metrics_window"
    intended, sent, latency = requests.intended[stage], requests.sent[stage], requests.latency[stage]
    finished = np.where(np.isfinite(latency), sent + latency, intended)
    start, end = float(np.nanmin(intended)), float(np.nanmax(finished))
    grace = metrics.grace
    details: dict[str, object] = {"window": [start, end], "grace": grace}
    problems = []
    clock = metrics.clock
    allowed = max(grace, MIN_SKEW_S)
    if clock is not None:
        skew, uncertain = clock["skew_s"], clock["uncertainty_s"]
        details["clock_skew_s"], details["clock_uncertainty_s"] = skew, uncertain
        if abs(skew) - uncertain > allowed:
            problems.append(
                f"Prometheus's clock is {skew:+.1f}s (+-{uncertain:.2g}s) from the clock that took the metrics "
                f"(its time() at collect time), more than the {allowed:g}s the windows allow: every window read "
                "from Prometheus is off by that much"
            )
    completions = int(np.count_nonzero(requests.succeeded() & stage))
    details["completions"] = completions
    counted = None if metrics.missing(names.SERVER_REQUESTS) else metrics.series[names.SERVER_REQUESTS]
    late = max(MIN_LATE_S, LATE_SCRAPES * grace)
    details["late_s"] = late
    server = counted.increase(start - grace, end + late) if counted is not None else None
    lost = 0  # completions the server may have taken with it when its process ended (none known yet)
    if counted is not None:
        details["server_finished"] = server
        if server is None:
            problems.append(
                f"the metrics hold no server count around the run's window ({_span(start, end)}): they were "
                "taken over another window"
            )
        else:
            restarts = _restart_windows(metrics, start - grace, end + late)
            lost = _lost_with_restarts(restarts, finished[requests.succeeded()[stage]])
            details["lost_with_restarts"] = lost
            if server < (1 - WINDOW_TOLERANCE) * completions - lost:
                problems.append(
                    f"Prometheus's {COUNTER} counts {server:.0f} requests the server finished in "
                    f"{_span(start, end)} (+{late:g}s), the records {completions} completions there"
                    + (f" ({lost} of them in the scrape intervals where the server restarted)" if lost else "")
                    + ": the metrics window does not hold the run's requests (the replayer's clock and "
                    "Prometheus's disagree, or the metrics were taken over another window)"
                )
    if problems:
        return Check(name, Status.INCONCLUSIVE, "; ".join(problems), samples=completions, details=details)
    if counted is None:
        reason = f"not cross-checked: {metrics.missing(names.SERVER_REQUESTS)} (no vLLM request counter)" + (
            "" if clock is None else f"; clock skew {clock['skew_s']:+.2f}s, within {allowed:g}s"
        )
        return Check(name, Status.PASS, reason, samples=completions, gating=False, details=details)
    reason = f"the server counted {server:.0f} finished requests in the run's window, the records {completions}"
    if lost:
        reason += (
            f" ({lost} of those finished in the scrape intervals where the server's counter "
            "restarted: a process that ends takes its unscraped counts with it)"
        )
    if clock is not None:
        reason += f"; clock skew {clock['skew_s']:+.2f}s, within {allowed:g}s"
    return Check(name, Status.PASS, reason, server, None, None, completions, details=details)


def _restart_windows(metrics: MetricsSnapshot, start: float, end: float) -> list[tuple[float, float]]:
    """(from, to) before each point in [start, end] where the server's counter was seen to drop: its last scrape
    before the restart lay at most a scrape interval (`grace`) and a query step before that point. Empty where the
    snapshot has no such series (taken before it was kept): no restart known."""
    restarts = None if metrics.missing(names.SERVER_RESTARTS) else metrics.series[names.SERVER_RESTARTS]
    if restarts is None or len(restarts.times) < 2:
        return []
    rose = np.nonzero(np.diff(restarts.values) > 0)[0] + 1
    width = metrics.grace + restarts.step
    return [(float(at) - width, float(at)) for at in restarts.times[rose] if start <= at <= end]


def _lost_with_restarts(resets: list[tuple[float, float]], finished: NDArray[np.float64]) -> int:
    """The completions a restarted server may never have had scraped: those that finished between its counter's last
    point before each drop and the first after it. At most one scrape interval's worth per restart."""
    return int(sum(np.count_nonzero((finished > before) & (finished <= after)) for before, after in resets))


def _span(start: float, end: float) -> str:
    def clock(epoch: float) -> str:
        return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")

    return f"{clock(start)}..{clock(end)} UTC"
