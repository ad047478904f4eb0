"""The per-stage checks: tail latency against a limit or a baseline, rates, OOM kills, replay validity.

Decision rule for every sampled quantity (docs/verdict.md): PASS when the whole confidence interval is on
the good side of the threshold, FAIL when the whole interval is beyond it, INCONCLUSIVE when it straddles
or when there are fewer than `min_samples` requests.

Unknown requests (kfchaos.verdict.requests.Requests.unknown: cancelled in flight, no outcome) are in every
denominator and count against a PASS: the upper end of an interval is taken as if each of them were an error
(or beyond the latency limit), the lower end as if none were. So a PASS holds whatever they were, a FAIL
is shown by the known ones alone, and anything between is INCONCLUSIVE.

A latency is not wholly unknown when its request was cut in flight: it is at least the time the request had
waited (right-censored there; Requests.latency_floor). A latency check takes each unknown request's floor: one
already beyond the limit is beyond it, a known violation; only the rest stay unknown (docs/verdict.md,
"Requests cut in flight").
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from kfchaos.metrics.oom import OomCount
from kfchaos.verdict.drift import DriftReference
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.stats import TAIL, clopper_pearson, empirical_quantile_rank, order_statistics, quantile_ranks

QUANTILE = 1.0 - TAIL


def _decide(low: float, high: float, limit: float) -> Status:
    if high <= limit:
        return Status.PASS
    if low > limit:
        return Status.FAIL
    return Status.INCONCLUSIVE


def _p99_with_interval(
    values: NDArray[np.float64], beyond: int, confidence: float, floors: NDArray[np.float64] | None = None
) -> tuple[float, tuple[float, float] | None]:
    """Empirical P99 and its order-statistic interval; `beyond` extra requests count as +inf (timeouts), and
    `floors` are the least latencies of requests whose own is unknown (censored: cut in flight; 0 when nothing is
    known).

    With floors, the interval's low end takes each at its floor (the lowest the P99 can be) and its high end each
    as +inf (the highest); the point estimate takes a request cut in flight at the time it waited (so it is a
    least value where such requests reach the tail) and one with no floor as +inf."""
    floors = np.zeros(0) if floors is None else floors
    if not len(floors):
        return _order_p99(values, beyond, confidence)
    cut = floors[floors > 0]
    point, _ = _order_p99(np.concatenate([values, cut]), beyond + len(floors) - len(cut), confidence)
    _, low = _order_p99(np.concatenate([values, floors]), beyond, confidence)
    _, high = _order_p99(values, beyond + len(floors), confidence)
    return point, (low[0], high[1]) if low and high else None


def _order_p99(values: NDArray[np.float64], beyond: int, confidence: float) -> tuple[float, tuple[float, float] | None]:
    n = len(values) + beyond
    ranks = quantile_ranks(n, QUANTILE, confidence)
    point_rank = empirical_quantile_rank(n, QUANTILE)
    wanted = (point_rank, *(ranks or ()))
    finite = [r for r in wanted if r <= len(values)]
    found = dict(zip(finite, order_statistics(values, tuple(finite)), strict=True))
    at = [found.get(r, math.inf) for r in wanted]
    return at[0], (at[1], at[2]) if ranks else None


def tail_check(
    name: str,
    values: NDArray[np.float64],
    beyond: int,
    limit: float,
    *,
    min_samples: int,
    confidence: float,
    what: str,
    floors: NDArray[np.float64] | None = None,
) -> Check:
    """P99 of `values` at most `limit` (seconds), decided by the share of requests above `limit` vs 1 %.
    `floors`: one per unknown request (no outcome), the least value it can have (the time a request cut in flight
    had waited; 0 when nothing is known). One whose floor is beyond `limit` is beyond it; the rest may be either
    side of the limit: a PASS holds with all of them above it."""
    floors = np.zeros(0) if floors is None else floors
    cut_beyond = floors[floors > limit]
    unknown = len(floors) - len(cut_beyond)
    n = len(values) + beyond + len(floors)
    if n == 0:
        return Check(name, Status.INCONCLUSIVE, f"no {what} in the records", threshold=limit, unit="s")
    above = int(np.count_nonzero(values > limit)) + beyond + len(cut_beyond)
    share_ci = _interval(above, unknown, n, confidence)
    p99, p99_ci = _p99_with_interval(values, beyond, confidence, floors)
    details: dict[str, object] = {
        "above": above,
        "unknown": unknown,
        "share_above": above / n,
        "share_interval": list(share_ci),
        "tail": TAIL,
    }
    if len(cut_beyond):
        details["cut_in_flight_above"] = len(cut_beyond)
        details["cut_in_flight_waited_min"] = float(cut_beyond.min())
    if n < min_samples:
        status, reason = Status.INCONCLUSIVE, f"only {n} requests with {what}; need at least {min_samples}"
    else:
        status = _decide(share_ci[0], share_ci[1], TAIL)
        reason = (
            f"{above}/{n} requests above {limit:.4g}s{_cut_note(cut_beyond)}{_unknown_note(unknown)}, "
            f"{100 * share_ci[0]:.2f}..{100 * share_ci[1]:.2f}% at {100 * confidence:g}% confidence vs {100 * TAIL:g}%"
        )
    return Check(name, status, reason, p99, limit, p99_ci, n, "s", details=details)


def _cut_note(cut_beyond: NDArray[np.float64]) -> str:
    """ "(12 of them cut in flight, waited ≥ 2.310 s)": requests with no answer when they were cut, each of them
    already waiting longer than the limit; the least of their waits, to the millisecond (so a wait just past a
    whole-second limit does not read as the limit itself)."""
    if not len(cut_beyond):
        return ""
    return f" ({len(cut_beyond)} of them cut in flight, waited ≥ {float(cut_beyond.min()):.3f} s)"


def _interval(count: int, unknown: int, total: int, confidence: float) -> tuple[float, float]:
    """The share's interval when `unknown` of `total` may or may not be events: its low end with none of them,
    its high end with all of them (docs/verdict.md, "Accounting")."""
    low, high = clopper_pearson(count, total, confidence)
    if unknown:
        high = clopper_pearson(count + unknown, total, confidence)[1]
    return low, high


def _unknown_note(unknown: int) -> str:
    return f" (+{unknown} unknown, counted against a PASS)" if unknown else ""


def drift_check(
    name: str,
    values: NDArray[np.float64],
    beyond: int,
    ref: DriftReference,
    drift_max: float,
    *,
    min_samples: int,
    confidence: float,
    what: str,
    floors: NDArray[np.float64] | None = None,
) -> Check:
    """P99 drift against the reference P99 (kfchaos.verdict.drift): the share above (1 + drift_max) x the
    reference decides, as in tail_check -- PASS against the reference's low end, FAIL against its high end."""
    base = {"reference": ref.source, "baseline_p99": ref.p99}
    if ref.problem is not None:
        return Check(name, Status.INCONCLUSIVE, ref.problem, threshold=drift_max, details=base)
    assert ref.p99 is not None

    def against(reference: float) -> Check:
        limit = (1.0 + drift_max) * reference
        return tail_check(
            name, values, beyond, limit, min_samples=min_samples, confidence=confidence, what=what, floors=floors
        )

    strict = against(ref.low)
    loose = against(ref.high) if ref.high != ref.low else strict
    status: Status
    if strict.status is Status.PASS:
        status, reason = strict.status, strict.reason
    elif loose.status is Status.FAIL:
        status, reason = loose.status, loose.reason
    elif ref.high != ref.low and strict.status is Status.FAIL:
        status = Status.INCONCLUSIVE
        reason = f"{strict.reason}; but within the reference's own interval ({ref.source})"
    else:
        status, reason = strict.status, strict.reason
    reason = f"{reason} (reference: {ref.source} {ref.p99:.4g}s)"
    value = None if strict.value is None else strict.value / ref.p99 - 1.0
    interval = None if strict.interval is None else (strict.interval[0] / ref.p99 - 1, strict.interval[1] / ref.p99 - 1)
    details = {
        **strict.details,
        **base,
        "reference_interval": [ref.low, ref.high],
        "limit_seconds": (1.0 + drift_max) * ref.low,
        "candidate_p99": strict.value,
    }
    return Check(name, status, reason, value, drift_max, interval, strict.samples, "ratio", details=details)


def rate_check(
    name: str,
    count: int,
    total: int,
    limit: float,
    *,
    min_samples: int,
    confidence: float,
    unknown: int = 0,
    details: dict[str, object] | None = None,
) -> Check:
    """A share of requests (errors, timeouts) at most `limit`, decided by its Clopper-Pearson interval; `unknown`
    of the `total` may be events or not, and a PASS must hold if all of them were."""
    if total == 0:
        return Check(name, Status.INCONCLUSIVE, "no requests sent", threshold=limit, unit="fraction")
    low, high = _interval(count, unknown, total, confidence)
    if total < min_samples:
        status, reason = Status.INCONCLUSIVE, f"only {total} requests; need at least {min_samples}"
    else:
        status = _decide(low, high, limit)
        reason = f"{count}/{total}{_unknown_note(unknown)}, {100 * low:.3f}..{100 * high:.3f}% vs {100 * limit:g}%"
        if status is Status.INCONCLUSIVE and count == 0 and not unknown:
            # Zero events still cannot show a small limit: say how many requests would (rule of three).
            needed = math.ceil(math.log((1 - confidence) / 2) / math.log1p(-limit)) if limit > 0 else 0
            reason += f"; showing <= {100 * limit:g}% with no events needs >= {needed} requests"
    extra = {"count": count, "unknown": unknown, **(details or {})}
    return Check(name, status, reason, count / total, limit, (low, high), total, "fraction", details=extra)


def oom_check(
    counted: OomCount | None,
    missing: str | None,
    served: int,
    limit: float,
    confidence: float,
    nodes: dict[str, dict[str, object]] | None = None,
) -> Check:
    """OOM events per request served: host-memory OOM kills plus GPU OOM crashes (kfchaos.metrics.oom).

    Events are counted, not sampled: the observed rate decides, the Clopper-Pearson interval on
    events/served is reported for scale. Shown events above the limit FAIL even when some evidence is
    missing; otherwise missing evidence (no kube-state-metrics, crashes whose logs could not be read)
    that could carry the rate over the limit is INCONCLUSIVE.
    """
    name = "oom_kill_rate"
    if counted is None:
        return Check(name, Status.INCONCLUSIVE, missing or "no OOM series", threshold=limit, unit="fraction")
    if served == 0:
        return Check(name, Status.INCONCLUSIVE, "no requests sent", threshold=limit, unit="fraction")
    host, gpu, unread = round(counted.host_kills), round(counted.gpu), round(counted.unread)
    node, node_unknown = round(counted.node), round(counted.node_unknown)
    count = host + gpu
    rate = count / served
    interval = clopper_pearson(min(count, served), served, confidence)
    details = {
        "oom_kills": count,
        "host_oom_kills": host,
        "host_oom_kills_kube_state_metrics": None if counted.host is None else round(counted.host),
        "host_oom_kills_cadvisor": None if counted.cadvisor is None else round(counted.cadvisor),
        "gpu_oom_crashes": gpu,
        "crash_restarts_unread": unread,
        "host_oom_kills_node": node,
        "crash_restarts_node_unknown": node_unknown,
        # The nodes the target ran on: cgroup version and how an OOM kill looks there (kfchaos.metrics.nodeoom).
        "nodes": nodes or {},
        "node_oom_kills_unexplained": round(counted.node_unexplained),
    }
    by_node = f" ({node} a crash while its node's kernel OOM-killed)" if node else ""
    shown = f"{host} host-memory OOM kill(s){by_node} + {gpu} GPU OOM crash(es)"
    reason = f"{shown} / {served} requests = {100 * rate:.4g}% vs {100 * limit:g}%"
    if rate > limit:
        status = Status.FAIL
    elif missing or counted.missing:
        status, reason = Status.INCONCLUSIVE, f"{reason}; cannot PASS: {missing or counted.missing}"
    elif (unread or node_unknown) and (count + unread + node_unknown) / served > limit:
        status = Status.INCONCLUSIVE
        if unread:
            reason += (
                f"; {unread} crash restart(s) whose previous log could not be read may be GPU OOMs "
                "(grant get pods/log, or see docs/verdict.md)"
            )
        if node_unknown:
            reason += (
                f"; {node_unknown} crash restart(s) on a node whose kernel OOM counter was not sampled may be OOM "
                "kills (scrape node-exporter's node_vmstat_oom_kill: docs/verdict.md, OOM kills)"
            )
    else:
        status = Status.PASS
    if counted.node_unexplained:
        reason += (
            f"; the kernel of the target's node(s) OOM-killed {round(counted.node_unexplained)} more time(s) with no "
            "restart of the target: another pod, or an engine worker killed while its server lives on "
            "(VLLM_KEEP_ALIVE_ON_ENGINE_DEATH: see the error rate)"
        )
    return Check(name, status, reason, rate, limit, interval, served, "fraction", details=details)


# Send lag (actual minus intended send time) changes the load the target sees, not the latency measured
# (that runs from the actual send). By Little's law the requests in flight are rate x latency; sending up to
# `lag` late shifts that by at most rate x lag, i.e. by lag / latency of it. So the lag a stage tolerates is a
# share of its median latency, never less than traffic.max_send_lag_p99: 60 ms is 2 % of a 3 s request and
# harmless, but 30 % of a 200 ms one.
SEND_LAG_SHARE = 0.05


def send_lag_tolerance(lag_p99_max: float, latency_p50: float | None) -> float:
    """The send-lag P99 a stage may have: max(traffic.max_send_lag_p99, SEND_LAG_SHARE x median latency)."""
    if latency_p50 is None or not math.isfinite(latency_p50):
        return lag_p99_max
    return max(lag_p99_max, SEND_LAG_SHARE * latency_p50)


def replay_check(
    send_lag: NDArray[np.float64],
    dropped: int,
    total: int,
    lag_p99_max: float,
    replayer_says: bool | str | None,
    latency_p50: float | None = None,
) -> Check:
    """Whether the load generator kept to its schedule: if it fell behind, what was measured is not the plan.

    Requests dropped at the concurrency limit do not make the replay invalid (the target was slow to answer, the
    replayer kept its schedule): they are errors in the stage's error rate (kfchaos.verdict.requests), the one
    accounting, and this check only reports how many there were.

    Give it the stage's traffic only: burst requests (a long-context-burst fault) are the fault, not the
    replay, and are left out of replay fidelity everywhere."""
    name = "replay"
    tolerance = send_lag_tolerance(lag_p99_max, latency_p50)
    lag = send_lag[np.isfinite(send_lag)]
    lag_p99 = float(np.quantile(lag, QUANTILE, method="inverted_cdf")) if len(lag) else math.nan
    details = {
        "send_lag_p99": None if math.isnan(lag_p99) else lag_p99,
        "dropped": dropped,
        "tolerance": tolerance,
        "latency_p50": latency_p50 if latency_p50 is not None and math.isfinite(latency_p50) else None,
    }
    if isinstance(replayer_says, str) or replayer_says is False:
        why = replayer_says if isinstance(replayer_says, str) else "the replayer marked this stage invalid"
        return Check(name, Status.INCONCLUSIVE, why, lag_p99, tolerance, None, total, "s", details=details)
    if not len(lag):
        return Check(name, Status.INCONCLUSIVE, "no request was sent", None, tolerance, None, total, "s")
    limit = f"{tolerance * 1000:.4g}ms" + ("" if tolerance == lag_p99_max else f" ({100 * SEND_LAG_SHARE:g}% of P50)")
    if lag_p99 > tolerance:
        reason = f"replayer fell behind: send lag P99 {lag_p99 * 1000:.1f}ms > {limit}"
        return Check(name, Status.INCONCLUSIVE, reason, lag_p99, tolerance, None, total, "s", details=details)
    reason = f"send lag P99 {lag_p99 * 1000:.1f}ms <= {limit}"
    if dropped:
        reason += f", {dropped}/{total} dropped at the concurrency limit (errors in error_rate)"
    return Check(name, Status.PASS, reason, lag_p99, tolerance, None, total, "s", details=details)
