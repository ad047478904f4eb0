"""The per-request record: the one data contract between the replay and everything downstream.

The replay writes these columns to Parquet (one file per stage and shard, or merged); the verdict,
the report and the audit read them through this schema. Times are seconds as float64: `intended`
and `sent` on the replay's monotonic-anchored wall clock (Unix epoch seconds), latencies as durations.
A column that does not apply (TTFT for a plain HTTP request) is null, never 0, so "missing" can never
be mistaken for "fast".
"""

from __future__ import annotations

import binascii
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from kfchaos.errors import KfchaosError

SCHEMA_VERSION = 4  # 2: fault_request; 3: ended; 4: finish_reason, model and the redirect..wrong_model kinds

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
    # Appended in order, so that the dictionary indices of older kinds never move.
    "empty_completion",
    # A completed answer is a 2xx (docs/verdict.md, "What counts as a completion"): these are failed requests too.
    "redirect",  # a 3xx answer: the replayer does not follow it (a gateway sending users to a login page)
    "empty_body",  # a 2xx with no body at all (a 204 No Content, or a HEAD request, excepted)
    "stream_error",  # the stream carried an error event (vLLM's `data: {"error": {...}}`, or `{"object": "error"}`)
    "finish_abort",  # the stream's choice ended with finish_reason "abort": the server gave up on it
    "finish_error",  # ... with finish_reason "error" (vLLM: a retryable internal error)
    "wrong_model",  # the answer named another model than the one asked for (a gateway's fallback): not the target's
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
        # The traffic-side fault that sent this request (kfchaos.traffic.trafficfaults), null for the traffic itself.
        # Such requests are the fault, and are left out of every figure that judges the traffic.
        pa.field("fault_request", pa.dictionary(pa.int16(), pa.string()), nullable=True),
        # When the replayer learned the request's outcome (epoch s), whatever it was: the response complete, the
        # connection cut, the stream found malformed, the timeout or the stage's end. Null if never sent. The
        # one time an error that has no latency (a cut stream) is known to have happened at.
        pa.field("ended", pa.float64(), nullable=True),
        # The finish_reason the stream's choice ended with ("stop", "length", "tool_calls", ...; null when none
        # came): "length" (capped at max_tokens or max_model_len) is a completion, reported; "abort" and "error" are
        # failed requests (the error column says so).
        pa.field("finish_reason", pa.dictionary(pa.int8(), pa.string()), nullable=True),
        # The `model` the answer named (its first chunk that names one; two names joined by "|" when its chunks
        # disagree); null when it named none (a plain HTTP API).
        pa.field("model", pa.dictionary(pa.int16(), pa.string()), nullable=True),
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


def impossible_data(table: pa.Table, batches: BatchReader | None = None, *, identity: bool = True) -> list[str]:
    """What in these records cannot have come from a replay, one `column: N rows ...` line per rule broken.

    Each rule closes a way a true FAIL read as PASS (issue 11 §4): negative or infinite durations (counted as
    fast), a completed request without a latency (the slow tail silently dropped), one request recorded twice
    (each weighed double: `_identity`), `sent` before `intended` (send lag hidden), and times or stages out of
    any range a run has (which also bounds the memory the verdict's time windows take). Columns absent from
    `table` are not checked; the caller decides which columns it needs. `batches` reads the id columns
    (request_id, trace_id) batch by batch when `table` lacks them.
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
    if identity:  # a reader may check it first (`repeated_requests`), before it holds the records in memory
        out += _identity(table, batches)
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


def repeated_requests(table: pa.Table, batches: BatchReader | None) -> list[str]:
    """The identity rule of `impossible_data` alone (see `_identity`): `table` may be the records' schema with
    no rows when `batches` reads them."""
    return _identity(table, batches)


def _identity(table: pa.Table, batches: BatchReader | None) -> list[str]:
    """A request is one record: the same request twice anywhere in a run's records would weigh it twice and dilute
    (or inflate) every rate. Two identities, both checked across the whole run (every file of it, every shard):

    - `trace_id`: the replayer gives every request it dispatches a fresh random 128-bit trace id
      (kfchaos.traffic.tagging.new_trace_id, sent as X-Trace-ID and traceparent), so a trace id twice is one
      request recorded twice: rows written twice, a stage's records copied under another stage or shard, its
      times shifted or not;
    - `request_id` within a stage: the source's id (the k-th loop of a recording appends `~k`; shards split the
      ids), so an id twice in one stage is one source request sent twice (a shard replayed twice, overlapping
      shard splits). Across stages an id repeats by design: every stage replays the same source.

    Each row gets a 64-bit key (`_trace_keys`, `_id_keys`), read batch by batch so the id columns, the largest
    in a records file, are never held whole; rows sharing a key are then compared in full.
    """
    names = set(table.column_names)
    read = batches or (lambda wanted: table.select(list(wanted)).to_batches(max_chunksize=ID_BATCH_ROWS))
    checks: list[tuple[str, tuple[str, ...], KeyOf]] = []
    if "trace_id" in names or batches is not None:
        checks.append(("trace_id", ("trace_id",), _trace_keys))
    if "stage" in names and ("request_id" in names or batches is not None):
        checks.append(("request_id", ("stage", "request_id"), _id_keys))
    words = {
        "trace_id": "a trace id already recorded (e.g. {example}): the replayer gives every request a fresh trace id, "
        "so these are copies of one request (rows written twice, a stage's records copied under another stage or "
        "shard, times shifted)",
        "request_id": "a request id already recorded in the same stage (e.g. {example}): one source request is one "
        "request (a shard replayed twice, overlapping shards, rows written twice)",
    }
    out = []
    for (name, columns, key_of), repeated_keys in zip(checks, _repeated_keys(read, checks), strict=True):
        repeated, example = _repeats(read, columns, key_of, repeated_keys)
        if repeated:
            out.append(f"{name}: {repeated} row(s) repeat " + words[name].format(example=example))
    return out


KeyOf = Callable[[pa.RecordBatch], NDArray[np.uint64]]


def _repeated_keys(read: BatchReader, checks: list[tuple[str, tuple[str, ...], KeyOf]]) -> list[NDArray[np.uint64]]:
    """For each check, the 64-bit keys that repeat: one pass over the id columns for all checks, the columns a
    check needs read together in each batch (a reader that lacks one gives that check nothing)."""
    wanted = tuple(dict.fromkeys(c for _, columns, _ in checks for c in columns))
    found = read(wanted) if wanted else None
    if found is None:  # read the checks' columns one check at a time
        return [_repeated(read(columns), key_of, columns) for _, columns, key_of in checks]
    keys: list[list[NDArray[np.uint64]]] = [[] for _ in checks]
    for batch in found:
        if batch.num_rows:
            for index, (_, columns, key_of) in enumerate(checks):
                keys[index].append(key_of(batch.select(list(columns))))
    return [_duplicated(parts) for parts in keys]


def _repeated(found: Iterable[pa.RecordBatch] | None, key_of: KeyOf, columns: tuple[str, ...]) -> NDArray[np.uint64]:
    if found is None:
        return np.zeros(0, dtype=np.uint64)
    return _duplicated([key_of(batch.select(list(columns))) for batch in found if batch.num_rows])


def _duplicated(parts: list[NDArray[np.uint64]]) -> NDArray[np.uint64]:
    if not parts:
        return np.zeros(0, dtype=np.uint64)
    key = np.concatenate(parts)
    key.sort()  # in place: the keys are the largest array here
    return np.unique(key[1:][key[1:] == key[:-1]])


# Reads the named columns as record batches, in the records' row order (None: the records lack one of them).
BatchReader = Callable[[tuple[str, ...]], "Iterable[pa.RecordBatch] | None"]
ID_BATCH_ROWS = 1 << 18
_MIX = np.uint64(0x9E3779B97F4A7C15)
_HEX = re.compile(rb"\A[0-9a-f]*\Z")


def _repeats(
    read: BatchReader, columns: tuple[str, ...], key_of: KeyOf, repeated_keys: NDArray[np.uint64]
) -> tuple[int, str]:
    """(rows repeating an earlier row's `columns`, one repeated value): the rows whose 64-bit key repeats are read
    again and compared in full (a second pass, only where a key repeats)."""
    if not len(repeated_keys):
        return 0, ""
    again = read(columns) or []
    candidates = [batch.filter(pa.array(np.isin(key_of(batch), repeated_keys))) for batch in again if batch.num_rows]
    rows = pa.Table.from_batches(candidates).combine_chunks() if candidates else None
    if rows is None or not rows.num_rows:
        return 0, ""
    counts = rows.group_by(list(columns)).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not twice.num_rows:
        return 0, ""  # only keys collided
    repeated = int(pc.sum(twice.column("count_all")).as_py()) - twice.num_rows
    first = twice.slice(0, 1).to_pylist()[0]
    example = f"{first[columns[-1]]!r} {first['count_all']} times"
    if "stage" in columns:
        example += f" in stage {first['stage']}"
    return repeated, example


def _fallback_keys(values: pa.Array) -> NDArray[np.uint64]:
    """Keys for ids of another shape (hand-made records, non-ASCII ids): Python's string hash, per row."""
    return np.array([hash(v) for v in values.to_pylist()], dtype=np.int64).view(np.uint64)


def _trace_keys(batch: pa.RecordBatch) -> NDArray[np.uint64]:
    """A 64-bit key of each trace id as the replayer writes them (32 lowercase hex digits: both 64-bit halves,
    mixed), decoded without a Python object per row; ids of another shape fall back to `_fallback_keys`."""
    chunk = batch.column(0)
    if not pa.types.is_string(chunk.type):
        chunk = chunk.cast(pa.string())
    offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
    if chunk.null_count or not bool(np.all(np.diff(offsets) == 32)):
        return _fallback_keys(chunk)
    data = memoryview(chunk.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
    if not _HEX.match(bytes(data)):
        return _fallback_keys(chunk)
    words = np.frombuffer(binascii.unhexlify(data), dtype=">u8").astype(np.uint64).reshape(-1, 2)
    with np.errstate(over="ignore"):
        return (words[:, 0] * _MIX) ^ words[:, 1]


def _id_keys(batch: pa.RecordBatch) -> NDArray[np.uint64]:
    """A key of (stage, request id) per row: the id left-padded to a multiple of 8 bytes (pyarrow's utf8_lpad),
    its 8-byte words mixed with the stage; non-ASCII or very long ids fall back to `_fallback_keys`."""
    stage = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64).astype(np.uint64)
    ids = batch.column(1)
    if not pa.types.is_string(ids.type):
        ids = ids.cast(pa.string())
    lengths = pc.binary_length(ids)
    longest = pc.max(lengths).as_py() or 0
    width = max(8, -(-int(longest) // 8) * 8)
    if ids.null_count or width > 64:
        return _fallback_keys(ids) ^ (stage * _MIX)
    padded = pc.utf8_lpad(ids, width, padding="\0")
    offsets = np.frombuffer(padded.buffers()[1], dtype=np.int32)[padded.offset : padded.offset + len(padded) + 1]
    if not bool(np.all(np.diff(offsets) == width)):  # a multi-byte character: lpad counts characters
        return _fallback_keys(ids) ^ (stage * _MIX)
    data = np.frombuffer(padded.buffers()[2], dtype=np.uint8)[int(offsets[0]) : int(offsets[-1])]
    words = data.view(np.uint64).reshape(len(padded), width // 8)
    key = stage * _MIX
    with np.errstate(over="ignore"):
        for column in range(words.shape[1]):
            key = (key ^ words[:, column]) * _MIX
            key ^= key >> np.uint64(29)
    return key
