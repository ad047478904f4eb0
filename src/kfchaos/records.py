"""The per-request record: the one data contract between the replay and everything downstream.

The replay writes these columns to Parquet (one file per stage and shard, or merged); the verdict,
the report and the audit read them through this schema. Times are seconds as float64: `intended`
and `sent` on the replay's monotonic-anchored wall clock (Unix epoch seconds), latencies as durations.
A column that does not apply (TTFT for a plain HTTP request) is null, never 0, so "missing" can never
be mistaken for "fast".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from kfchaos.errors import KfchaosError

SCHEMA_VERSION = 3  # 2: fault_request; 3: ended

# Error kinds a record's `error` column may hold (null when the request succeeded at the HTTP level).
ERROR_KINDS = (
    "timeout",  # no complete response within target.timeout
    "connect",  # connection refused / reset before a response
    "http",  # response with status >= 500 (the verdict counts every status >= 400 as failed, docs/verdict.md)
    "protocol",  # malformed HTTP or SSE stream, or a streamed 2xx without a first token
    "dropped",  # not sent: the concurrency limit was reached at its intended time (an error for its user)
    "cancelled",  # the stage ended (abort or time-up) before a response (unknown: counted against a PASS)
    # The replayer's own client closed the stream on purpose (a client-abort-storm fault request): designed, not
    # a failure of the target, and never counted as an error of the traffic.
    "client_abort",
    # A streamed 2xx that ended with `data: [DONE]` and no output token: nothing was served (kfchaos.traffic.sse).
    # Last, so that the dictionary indices of older kinds do not move.
    "empty_completion",
)

REQUEST_SCHEMA = pa.schema(
    [
        pa.field("stage", pa.int16(), nullable=False),  # stage percent, e.g. 60
        pa.field("shard", pa.int16(), nullable=False),  # shard index (0 when not sharded)
        pa.field("request_id", pa.string(), nullable=False),  # id in the traffic source
        pa.field("trace_id", pa.string(), nullable=False),  # X-Trace-ID / traceparent trace id (32 hex)
        pa.field("fault_active", pa.bool_(), nullable=False),  # whether any fault was active at send time
        pa.field("intended", pa.float64(), nullable=False),  # scheduled send time (epoch s)
        pa.field("sent", pa.float64(), nullable=True),  # request started, before connecting (epoch s); null if dropped
        pa.field("status", pa.int16(), nullable=True),  # HTTP status; null if none received
        pa.field("error", pa.dictionary(pa.int8(), pa.string()), nullable=True),  # one of ERROR_KINDS
        pa.field("latency", pa.float64(), nullable=True),  # response complete - sent (s)
        pa.field("latency_intended", pa.float64(), nullable=True),  # response complete - intended (s)
        pa.field("ttft", pa.float64(), nullable=True),  # first token - sent (s), streaming only
        pa.field("itl_mean", pa.float64(), nullable=True),  # mean inter-token latency (s)
        pa.field("itl_p99", pa.float64(), nullable=True),  # p99 inter-token latency within the request (s)
        pa.field("itl_max", pa.float64(), nullable=True),
        pa.field("tpot", pa.float64(), nullable=True),  # (latency - ttft) / (output_tokens - 1)
        pa.field("prompt_tokens", pa.int32(), nullable=True),
        pa.field("output_tokens", pa.int32(), nullable=True),
        pa.field("bytes_sent", pa.int64(), nullable=True),
        pa.field("bytes_received", pa.int64(), nullable=True),
        pa.field("long_context", pa.bool_(), nullable=False),  # part of a long-context burst fault
        # Seconds spent opening connections (TCP, TLS) for this request, 0 on a kept-alive one; null if not
        # sent. Part of latency and ttft (which start before the connection, as in vLLM's bench client).
        pa.field("connect", pa.float64(), nullable=True),
        # The traffic-side fault that sent this request (kfchaos.traffic.faultload), null for the traffic itself.
        # Such requests are the fault, and are left out of every figure that judges the traffic.
        pa.field("fault_request", pa.dictionary(pa.int16(), pa.string()), nullable=True),
        # When the replayer learned the request's outcome (epoch s), whatever it was: the response complete, the
        # connection cut, the stream found malformed, the timeout or the stage's end. Null if never sent. The
        # one time an error that has no latency (a cut stream) is known to have happened at.
        pa.field("ended", pa.float64(), nullable=True),
    ],
    metadata={b"kfchaos.records.version": str(SCHEMA_VERSION).encode()},
)

COLUMNS = tuple(REQUEST_SCHEMA.names)
# Parquet metadata key naming the run whose records a file holds (written into a run folder's records.parquet):
# a folder mixing two runs is refused (kfchaos.verdict.requests).
RUN_ID_KEY = b"kfchaos.run_id"
SPOOL_KEY = b"kfchaos.records.spool"  # the parts one replay wrote as it went (kfchaos.traffic.recorder.Spool)
# Every part a replay writes as it goes is marked incomplete; its last part says how the replay ended (END_KEY):
# END_COMPLETE (every request it took is in the parts), or CUT + why (it stopped sending: a full disk...). Parts with
# no end were left by a replay that did not finish (killed, or a disk that failed even the last part).
COMPLETE_KEY = b"kfchaos.records.complete"
END_KEY = b"kfchaos.records.end"
END_COMPLETE = "complete"
CUT = "cut: "


class RecordsError(KfchaosError):
    """The records file cannot be used: unreadable, a column missing or of the wrong type, or impossible data."""


# No replay spans more than this from its first intended send to its last response; a record outside it is a
# corrupt clock (int64 min, a time 1e12 s away), and would make the per-window arrays of the verdict huge.
MAX_SPAN_S = 7 * 86400.0
# `sent` is taken after `intended` has come (open loop, one clock); allow a float rounding of the epoch offset.
SEND_BEFORE_INTENDED_TOLERANCE_S = 1e-3
STAGE_RANGE = (0, 100)
DURATIONS = ("latency", "latency_intended", "ttft", "itl_mean", "itl_p99", "itl_max", "tpot", "connect")


def unfinished_stages(path: str | Path) -> dict[int, str]:
    """Stage -> why its records are not a whole stage: the parts of a replay (one SPOOL_KEY) that say it was cut, or
    that say nothing of how it ended. Reads the footers and the stage column of spool parts only; whole files (no
    SPOOL_KEY) and anything unreadable are left to the reader."""
    path = Path(path)
    files = sorted(p for p in path.glob("*.parquet") if p.is_file()) if path.is_dir() else [path]
    spools: dict[bytes, list[tuple[Path, dict[bytes, bytes]]]] = {}
    for file in files:
        try:
            metadata = pq.read_schema(file).metadata or {}
        except (OSError, pa.ArrowInvalid):
            continue
        if SPOOL_KEY in metadata:
            spools.setdefault(metadata[SPOOL_KEY], []).append((file, metadata))
    out: dict[int, str] = {}
    for parts in spools.values():
        ends = [m[END_KEY].decode(errors="replace") for _, m in parts if END_KEY in m]
        if END_COMPLETE in ends:
            continue
        cut = next((end[len(CUT) :] for end in ends if end.startswith(CUT)), None)
        why = (
            f"the replay was cut: {cut}; the stage is judged on no more than it sent"
            if cut is not None
            else f"the replay that wrote these records did not finish ({len(parts)} part(s), none says how it "
            "ended: killed, or its disk failed): the stage is not whole"
        )
        for file, _ in parts:
            try:
                stages = pq.read_table(file, columns=["stage"]).column("stage")
            except (OSError, pa.ArrowInvalid, KeyError):
                continue
            for stage in pc.unique(stages).to_pylist():
                if isinstance(stage, int):
                    out[stage] = why
    return out


def _count(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(mask).as_py() or 0)


def _floats(table: pa.Table, name: str) -> pa.ChunkedArray:
    column = table.column(name)
    return column if column.type == pa.float64() else column.cast(pa.float64(), safe=False)


# Row indices -> their request ids, for readers that keep the (large) request_id column on disk.
IdReader = Callable[[NDArray[np.int64]], pa.Array | pa.ChunkedArray]


def impossible_data(table: pa.Table, request_ids: IdReader | None = None) -> list[str]:
    """What in these records cannot have come from a replay, one `column: N rows ...` line per rule broken.

    Each rule closes a way a true FAIL read as PASS (issue 11 §4): negative or infinite durations (counted as
    fast), a completed request without a latency (the slow tail silently dropped), rows written twice (each
    request weighed double), `sent` before `intended` (send lag hidden), and times or stages out of any range a
    run has (which also bounds the memory the verdict's time windows take). Columns absent from `table` are
    not checked; the caller decides which columns it needs. `request_ids` reads the ids of given rows when
    `table` lacks the request_id column (read only for rows that may repeat).
    """
    names = set(table.column_names)
    out: list[str] = []
    if "stage" in names:
        stage = table.column("stage")
        if not pa.types.is_integer(stage.type):
            out.append(f"stage: type {stage.type}, expected integer stage percents")
        else:
            low, high = STAGE_RANGE
            bad = _count(pc.or_(pc.less(stage, low), pc.greater(stage, high)))
            if bad:
                out.append(f"stage: {bad} row(s) outside {low}..{high} (stage percents)")
    if "long_context" in names and not (
        pa.types.is_boolean(table.column("long_context").type) or pa.types.is_null(table.column("long_context").type)
    ):
        out.append(f"long_context: type {table.column('long_context').type}, expected bool")
    for name in ("intended", "sent", "ended", *DURATIONS):
        if name not in names or not _numeric(table.column(name).type):
            continue
        values = _floats(table, name)
        infinite = _count(pc.is_inf(values))
        if infinite:
            out.append(f"{name}: {infinite} row(s) infinite")
        if name in DURATIONS:
            negative = _count(pc.less(values, 0.0))
            if negative:
                out.append(f"{name}: {negative} row(s) negative (a duration cannot be)")
            too_long = _count(pc.greater(values, MAX_SPAN_S))
            if too_long:
                out.append(f"{name}: {too_long} row(s) longer than {MAX_SPAN_S:.0f} s")
    if "intended" in names and _numeric(table.column("intended").type):
        intended = _floats(table, "intended")
        missing = _count(pc.is_null(intended, nan_is_null=True))
        if missing:
            out.append(f"intended: {missing} row(s) null or NaN (every record has its scheduled time)")
        out += _span(table, intended)
        if "sent" in names and _numeric(table.column("sent").type):
            early = _count(pc.less(pc.subtract(_floats(table, "sent"), intended), -SEND_BEFORE_INTENDED_TOLERANCE_S))
            if early:
                out.append(f"sent: {early} row(s) earlier than intended (a request is sent when it is due, not before)")
        if {"sent", "ended"} <= names and _numeric(table.column("sent").type) and _numeric(table.column("ended").type):
            before = _count(pc.less(pc.subtract(_floats(table, "ended"), _floats(table, "sent")), 0.0))
            if before:
                out.append(f"ended: {before} row(s) earlier than sent (a request ends after it starts)")
    out += _completed_without_latency(table)
    if request_ids is None and "request_id" in names:
        column = table.column("request_id")
        request_ids = lambda rows: column.take(pa.array(rows))  # noqa: E731
    if request_ids is not None:
        out += _duplicates(table, request_ids)
    return out


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _span(table: pa.Table, intended: pa.ChunkedArray) -> list[str]:
    first = pc.min(intended).as_py()
    if first is None or not math.isfinite(first):
        return []
    out = []
    for name in ("intended", "sent", "ended"):
        if name in table.column_names and _numeric(table.column(name).type):
            values = _floats(table, name)
            outside = _count(pc.or_(pc.less(values, first - MAX_SPAN_S), pc.greater(values, first + MAX_SPAN_S)))
            if outside:
                out.append(
                    f"{name}: {outside} row(s) more than {MAX_SPAN_S:.0f} s from the first intended time {first:.3f}"
                )
    return out


def _completed_without_latency(table: pa.Table) -> list[str]:
    """A request that was sent and answered without error has a latency; NaN or null hides a slow response."""
    names = set(table.column_names)
    if not {"sent", "error", "latency"} <= names or not _numeric(table.column("latency").type):
        return []
    error = table.column("error")
    if pa.types.is_dictionary(error.type):
        error = error.cast(pa.string())
    sent = _floats(table, "sent") if _numeric(table.column("sent").type) else None
    if sent is None or not (pa.types.is_string(error.type) or pa.types.is_null(error.type)):
        return []
    completed = pc.and_(pc.is_null(error), pc.invert(pc.is_null(sent, nan_is_null=True)))
    if "status" in names and _numeric(table.column("status").type):
        server_error = pc.fill_null(pc.greater_equal(table.column("status"), 500), False)
        completed = pc.and_(completed, pc.invert(server_error))
    missing = _count(pc.and_(completed, pc.is_null(_floats(table, "latency"), nan_is_null=True)))
    if missing:
        return [f"latency: {missing} completed request(s) without a latency (null or NaN)"]
    return []


def _duplicates(table: pa.Table, request_ids: IdReader) -> list[str]:
    """Rows written twice: the same request id twice in a stage at the same intended time.

    Request ids are unique within a stage (the k-th loop of a recording appends `~k`; shards split by id) and a
    request's intended time follows from its id, so a repeated row repeats (stage, intended). Those keys are
    compared first, in numpy (records are in time order within a stage, so usually without a sort); only rows
    sharing a key have their ids compared -- grouping all ids of 10 million records would cost seconds.
    """
    if not {"stage", "intended"} <= set(table.column_names) or table.num_rows < 2:
        return []
    if not _numeric(table.column("intended").type) or not pa.types.is_integer(table.column("stage").type):
        return []
    stage = np.asarray(table.column("stage").to_numpy(), dtype=np.int64)
    intended = np.asarray(_floats(table, "intended").to_numpy(), dtype=np.float64)
    same_stage = stage[1:] == stage[:-1]
    in_order = bool(np.all(intended[1:][same_stage] >= intended[:-1][same_stage])) and (
        np.count_nonzero(~same_stage) == len(pc.unique(table.column("stage"))) - 1
    )
    order = np.arange(len(stage)) if in_order else np.lexsort((intended, stage))
    key_stage, key_time = stage[order], intended[order]
    equal = np.flatnonzero((key_stage[1:] == key_stage[:-1]) & (key_time[1:] == key_time[:-1]))
    if len(equal) == 0:
        return []
    rows = order[np.unique(np.concatenate([equal, equal + 1]))]
    candidates = pa.table({"stage": stage[rows], "intended": intended[rows], "request_id": request_ids(rows)})
    distinct = candidates.group_by(["stage", "intended", "request_id"]).aggregate([]).num_rows
    repeated = len(rows) - distinct
    if repeated:
        return [f"request_id: {repeated} row(s) repeat a request id already recorded in the same stage"]
    return []
