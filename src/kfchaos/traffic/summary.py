"""The per-stage summary, computed from the per-request records (so merged shards summarize the same way).

Validity: the replayer checks itself. A stage is INVALID (the verdict then says INCONCLUSIVE) when its
p99 send lag (actual minus intended send time) is above `max_send_lag_p99`, when it was still behind at
the end (median lag over the last tenth of the stage above that threshold: a growing backlog), or when
it has no requests at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kfchaos.traffic.settings import NO_GOODPUT_SLO, GoodputSlo

PERCENTILES = (50, 90, 95, 99)


def _column(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def distribution(values: np.ndarray) -> dict[str, float] | None:
    """p50/p90/p95/p99/max/mean of the non-null values, or None when there are none."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    points = np.percentile(values, PERCENTILES)
    out = {f"p{p}": float(v) for p, v in zip(PERCENTILES, points, strict=True)}
    out["max"] = float(values.max())
    out["mean"] = float(values.mean())
    return out


@dataclass
class StageSummary:
    stage: int
    shards: list[int]
    duration: float
    intended: int  # requests the plan scheduled
    sent: int
    completed: int  # a response was received (any status)
    ok: int  # completed without error with a 2xx status
    dropped: int  # not sent: concurrency limit
    errors: dict[str, int]
    status: dict[str, int]  # by class: 2xx, 3xx, 4xx, 5xx
    intended_rate: float
    achieved_rate: float
    latency: dict[str, float] | None
    latency_intended: dict[str, float] | None  # from intended send time: coordinated omission shows here
    send_lag: dict[str, float] | None
    ttft: dict[str, float] | None = None
    # Distribution over requests of each request's own p99 inter-token gap (so its p99 is "the p99 of per-request
    # p99s", close to each request's worst gap): not vLLM bench's ITL p99, which pools every gap of every request.
    itl_request_p99: dict[str, float] | None = None
    tpot: dict[str, float] | None = None
    output_tokens: int = 0
    output_tokens_per_s: float = 0.0
    goodput: float | None = None  # good requests per second (all SLOs met), LLM APIs only
    good_requests: int | None = None
    long_context_requests: int = 0
    valid: bool = True
    invalid_reason: str | None = None
    plan_hash: str | None = None
    source: dict[str, Any] | None = None  # the SourceReport: lines read, malformed lines with numbers
    notes: list[str] = field(default_factory=list)
    # The replayer's own event-loop stalls (kfchaos.traffic.engine `_watch_loop`): `max` and `total` seconds its
    # timer ran late, `count` stalls of 5 ms or more. A record's times can be late by up to the stalls it lived
    # through; the measurement, not the server, was slow then. None: not measured (a merged or older summary).
    client_stall: dict[str, float] | None = None

    @property
    def answered(self) -> bool:
        """Whether any request got a response: against a dead port every request is a connect error, and a
        stage that measured nothing must not read as a valid replay (`kfchaos replay` exits 2)."""
        return self.completed > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def combined_stalls(parts: list[dict[str, float] | None]) -> dict[str, float] | None:
    """One stage's `client_stall` from its shards' (None when any shard's was not measured)."""
    if not parts or any(part is None for part in parts):
        return None
    known = [part for part in parts if part is not None]
    return {"max": max(p["max"] for p in known), "total": sum(p["total"] for p in known),
            "count": sum(p["count"] for p in known)}  # fmt: skip


def summarize(
    table: pa.Table,
    *,
    stage: int,
    duration: float | None,
    max_send_lag_p99: float,
    goodput: GoodputSlo = NO_GOODPUT_SLO,
    streaming: bool = False,
) -> StageSummary:
    n = table.num_rows
    intended = _column(table, "intended")
    sent = _column(table, "sent")
    latency = _column(table, "latency")
    errors_col = table.column("error")
    error_counts: dict[str, int] = {}
    if n:
        for item in pc.value_counts(errors_col.combine_chunks().dictionary_decode()).to_pylist():
            if item["values"] is not None:
                error_counts[item["values"]] = item["counts"]
    status = _column(table, "status")
    status_classes: dict[str, int] = {}
    for low in (100, 200, 300, 400, 500):
        count = int(((status >= low) & (status < low + 100)).sum())
        if count:
            status_classes[f"{low // 100}xx"] = count
    if duration is None:
        duration = float(intended.max() - intended.min()) if n > 1 else 0.0
    is_sent = ~np.isnan(sent)
    lag = sent[is_sent] - intended[is_sent]
    lag_dist = distribution(lag)
    valid, reason = True, None
    if n == 0:
        valid, reason = False, "no requests in the stage"
    elif lag_dist is not None and lag_dist["p99"] > max_send_lag_p99:
        valid, reason = False, f"send lag p99 {lag_dist['p99'] * 1000:.1f} ms above {max_send_lag_p99 * 1000:g} ms"
    elif lag.size >= 10:
        tail = intended[is_sent] >= intended.min() + 0.9 * (intended.max() - intended.min())
        behind = float(np.median(lag[tail])) if tail.any() else 0.0
        if behind > max_send_lag_p99:
            valid, reason = False, f"backlog growing: still {behind * 1000:.1f} ms behind at the end of the stage"
    completed = int((status >= 0).sum())
    # ok: a 1xx-3xx answer without error. A 4xx is no replay error (records keep error null, as the schema
    # says), but it is not a success either; it is counted under status.
    no_error = errors_col.is_null().to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
    ok = int(((status >= 200) & (status < 300) & no_error).sum())  # a completion is a 2xx (docs/verdict.md)
    seconds = duration

    def rate(count: float) -> float:
        return count / seconds if seconds else 0.0

    summary = StageSummary(
        stage=stage,
        shards=sorted({int(s) for s in table.column("shard").to_pylist()}) if n else [],
        duration=duration,
        intended=n,
        sent=int(is_sent.sum()),
        completed=completed,
        ok=ok,
        dropped=error_counts.get("dropped", 0),
        errors=error_counts,
        status=status_classes,
        intended_rate=rate(n),
        achieved_rate=rate(int(is_sent.sum())),
        latency=distribution(latency),
        latency_intended=distribution(_column(table, "latency_intended")),
        send_lag=lag_dist,
        long_context_requests=int(pc.sum(table.column("long_context")).as_py() or 0) if n else 0,
        valid=valid,
        invalid_reason=reason,
    )
    if streaming:
        ttft, tpot = _column(table, "ttft"), _column(table, "tpot")
        tokens = _column(table, "output_tokens")
        summary.ttft = distribution(ttft)
        summary.itl_request_p99 = distribution(_column(table, "itl_p99"))
        summary.tpot = distribution(tpot)
        summary.output_tokens = int(np.nansum(tokens))
        summary.output_tokens_per_s = rate(summary.output_tokens)
        good = errors_col.is_null().to_numpy(zero_copy_only=False) & ~np.isnan(ttft) if n else np.zeros(0, bool)
        # A request with one output token has no TPOT; like vLLM, it is not held against the TPOT limit.
        with np.errstate(invalid="ignore"):
            if goodput.ttft is not None:
                good &= ttft <= goodput.ttft
            if goodput.tpot is not None:
                good &= np.isnan(tpot) | (tpot <= goodput.tpot)
            if goodput.e2e is not None:
                good &= latency <= goodput.e2e
        summary.good_requests = int(good.sum())
        summary.goodput = rate(summary.good_requests)
    return summary
