"""Per-request records as numpy columns: read once (only the columns the verdict needs), classify once.

Every later step is a boolean mask over these arrays, so 10 million records cost a few hundred MB and a
few vectorized passes, not a Python loop.

The accounting (docs/verdict.md, "Accounting") is defined here and nowhere else: every request the replay
scheduled is counted (`counted`), dropped and cancelled ones included; it is a success, an error, a timeout,
unknown (cancelled in flight: no answer yet; its latency is at least the time it waited, `latency_floor`) or
excluded (a status the experiment lists in slo.excluded_statuses). The SLO checks, the abort windows, the replay
check and the control baseline all read these masks, so they cannot disagree on what was sent or what failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from numpy.typing import NDArray

from kfchaos import parquetguard
from kfchaos.records import (
    ERROR_KINDS,
    ID_BATCH_ROWS,
    REQUEST_SCHEMA,
    RUN_ID_KEY,
    SPOOL_KEY,
    BatchReader,
    RecordsError,
    impossible_data,
    repeated_requests,
)

NEEDED = ("stage", "intended", "sent", "status", "error", "latency", "ttft", "itl_p99", "tpot", "fault_active")
# Read when present; older records may lack them.
OPTIONAL = ("long_context", "fault_request", "finish_reason", "model", "ended")
NO_ERROR = -1
_KIND_CODE = {kind: code for code, kind in enumerate(ERROR_KINDS)}
TIMEOUT, CONNECT, HTTP, PROTOCOL, DROPPED, CANCELLED, CLIENT_ABORT, EMPTY = (
    _KIND_CODE[k]
    for k in ("timeout", "connect", "http", "protocol", "dropped", "cancelled", "client_abort", "empty_completion")
)
# Kinds of a failed request (the error column): no answer, a malformed one, or an answer that is not a completion
# (docs/verdict.md, "What counts as a completion").
FAILED_KINDS = tuple(
    _KIND_CODE[k]
    for k in (
        "dropped", "connect", "http", "protocol", "empty_completion",
        "redirect", "empty_body", "stream_error", "finish_abort", "finish_error", "wrong_model",
    )
)  # fmt: skip
# Only a completed 2xx answer is a success. Any other status failed for its user, unless the experiment excludes
# it: 3xx (the replayer follows no redirect: a gateway sending users to a login page), 4xx (429 Too Many Requests
# is how a server sheds load, vLLM's 400 refuses a prompt over --max-model-len) and 5xx (503 sheds load too).
SUCCESS_STATUS = (200, 300)


MAX_FAULT_NAMES = 2**15 - 1  # records.REQUEST_SCHEMA keeps fault_request as a dictionary with int16 indices
# Not one value per record:
_NOT_ROWS = ("_masks", "_floats_cache", "fault_names", "finish_names", "model_names", "excluded_statuses")

__all__ = ["RecordsError", "Requests", "from_table", "load_requests"]


@dataclass(frozen=True)
class Requests:
    """Columns of the records; floats hold NaN where the record has null."""

    stage: NDArray[np.int16]
    intended: NDArray[np.float64]
    sent: NDArray[np.float64]
    status: NDArray[np.float64]
    error: NDArray[np.int8]  # index into ERROR_KINDS, NO_ERROR when null
    latency: NDArray[np.float64]
    ttft: NDArray[np.float64]
    itl_p99: NDArray[np.float64]
    tpot: NDArray[np.float64]
    fault_active: NDArray[np.bool_]
    # Sent by a traffic-side fault (records' fault_request, or long_context from a long-context burst): part of the
    # fault, not the traffic, so left out of the traffic's figures.
    injected: NDArray[np.bool_]
    # Which traffic-side fault sent each request: an index into fault_names, -1 for none (records' fault_request,
    # dictionary-encoded: four bytes a record, not a string).
    fault_code: NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    fault_names: tuple[str, ...] = ()
    # The finish_reason of each request: an index into finish_names, -1 for none (records' finish_reason).
    finish_code: NDArray[np.int16] = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    finish_names: tuple[str, ...] = ()
    # The model each answer named: an index into model_names, -1 for none (records' model).
    model_code: NDArray[np.int16] = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    model_names: tuple[str, ...] = ()
    # When the replayer learned each request's outcome (records' ended, schema version 3), NaN where not recorded:
    # for a request cut in flight, the moment it was cut.
    ended: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    # Statuses the experiment excludes (spec.slo.excluded_statuses): neither success nor error, out of every
    # denominator and every latency sample.
    excluded_statuses: tuple[int, ...] = ()
    # The class masks below are asked for many times per stage; computed once each.
    _masks: dict[str, NDArray[np.bool_]] = field(default_factory=dict, repr=False, compare=False)
    _floats_cache: dict[str, NDArray[np.float64]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.fault_code) != len(self.stage):  # built without fault codes: no request names its fault
            object.__setattr__(self, "fault_code", np.full(len(self.stage), -1, dtype=np.int32))
        if len(self.ended) != len(self.stage):  # not recorded (records before version 3): no end known
            object.__setattr__(self, "ended", np.full(len(self.stage), np.nan))
        for name in ("finish_code", "model_code"):  # not recorded (older records): none known
            if len(getattr(self, name)) != len(self.stage):
                object.__setattr__(self, name, np.full(len(self.stage), -1, dtype=np.int16))

    def __len__(self) -> int:
        return len(self.stage)

    def where(self, mask: NDArray[np.bool_]) -> Requests:
        rows = {f.name: getattr(self, f.name)[mask] for f in fields(self) if f.name not in _NOT_ROWS}
        return Requests(
            **rows,
            fault_names=self.fault_names,
            finish_names=self.finish_names,
            model_names=self.model_names,
            excluded_statuses=self.excluded_statuses,
        )

    def excluding(self, statuses: tuple[int, ...] | list[int]) -> Requests:
        """The same records, with answers of these statuses excluded (neither success nor error)."""
        rows = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_ROWS}
        return Requests(
            **rows,
            fault_names=self.fault_names,
            finish_names=self.finish_names,
            model_names=self.model_names,
            excluded_statuses=tuple(sorted(set(statuses))),
        )

    def sent_by(self, fault: str) -> NDArray[np.bool_]:
        """Rows the named traffic-side fault sent (none when the records do not say which fault sent what)."""
        if fault not in self.fault_names:
            return np.zeros(len(self), dtype=np.bool_)
        return self.fault_code == self.fault_names.index(fault)

    def _mask(self, name: str, compute: Callable[[], NDArray[np.bool_]]) -> NDArray[np.bool_]:
        if name not in self._masks:
            self._masks[name] = compute()
        return self._masks[name]

    # Classes of request, as the checks count them (docs/verdict.md, "Accounting", defines each).
    def excluded(self) -> NDArray[np.bool_]:
        """Answered with a status the experiment excludes (and no transport or stream error)."""

        def compute() -> NDArray[np.bool_]:
            if not self.excluded_statuses:
                return np.zeros(len(self), dtype=np.bool_)
            listed = np.isin(self.status, np.asarray(self.excluded_statuses, dtype=np.float64))
            return listed & ((self.error == NO_ERROR) | (self.error == HTTP))

        return self._mask("excluded", compute)

    def counted(self) -> NDArray[np.bool_]:
        """The denominator of every rate: each request the replay scheduled, sent or not (dropped at the
        concurrency limit, cancelled in flight), except excluded statuses and the client's own designed aborts
        (a client-abort-storm request; on a traffic row `client_abort` cannot come from a replay, so it stays
        counted, as unknown, and cannot take a request out of the denominator)."""
        return self._mask("counted", lambda: ~self.excluded() & ~((self.error == CLIENT_ABORT) & self.injected))

    def was_sent(self) -> NDArray[np.bool_]:
        """Left the replayer (has a send time): the sample of send lag. Not a denominator: see `counted`."""
        return self._mask("sent", lambda: ~np.isnan(self.sent))

    def timed_out(self) -> NDArray[np.bool_]:
        return self._mask("timeout", lambda: (self.error == TIMEOUT) & self.counted())

    def failed(self) -> NDArray[np.bool_]:
        """Errors other than timeouts: dropped, connection, protocol, an answer that is not a completion (empty,
        redirected, an error event, finish_reason abort or error), and any status outside 2xx not excluded
        (timeouts have their own check; cancelled ones are unknown, not failed)."""

        def compute() -> NDArray[np.bool_]:
            by_kind = np.isin(self.error, np.array(FAILED_KINDS, dtype=np.int8))
            low, high = SUCCESS_STATUS
            outside = (self.status >= high) | ((self.status >= 100) & (self.status < low))  # a 1xx never ends one
            refused = outside & (self.error != TIMEOUT) & (self.error != CANCELLED)
            return (by_kind | refused) & self.counted()  # NaN (no status) compares False

        return self._mask("failed", compute)

    def succeeded(self) -> NDArray[np.bool_]:
        """Sent and answered 2xx without error: the only requests whose latencies enter a latency quantile."""

        def compute() -> NDArray[np.bool_]:
            low, high = SUCCESS_STATUS
            answered = (self.error == NO_ERROR) & (self.status >= low) & (self.status < high)  # NaN compares False
            return answered & self.was_sent() & self.counted()

        return self._mask("ok", compute)

    def failed_by_kind(self) -> dict[str, int]:
        """How the failed requests failed: their error kind, or for an answer refused by its status alone the
        status class ("status 429", "status 3xx" for an older record's redirect), most frequent first."""
        failed = self.failed()
        out: dict[str, int] = {}
        for code in np.unique(self.error[failed]).tolist():
            if code != NO_ERROR:
                out[ERROR_KINDS[code]] = int(np.count_nonzero(failed & (self.error == code)))
        bare = failed & (self.error == NO_ERROR) & np.isfinite(self.status)
        for status in np.unique(self.status[bare]).tolist():
            label = f"status {int(status)}" if status >= 400 else f"status {int(status) // 100}xx"
            out[label] = out.get(label, 0) + int(np.count_nonzero(bare & (self.status == status)))
        return dict(sorted(out.items(), key=lambda item: -item[1]))

    def answered_by(self) -> dict[str, int]:
        """The model each answered request's answer named, with how many, most frequent first (empty when the
        records name none)."""
        named = self.counted() & (self.model_code >= 0)
        out = {
            self.model_names[code]: int(np.count_nonzero(named & (self.model_code == code)))
            for code in np.unique(self.model_code[named]).tolist()
        }
        return dict(sorted(out.items(), key=lambda item: -item[1]))

    def finish_reasons(self) -> dict[str, int]:
        """The finish_reason of the successful requests (stop, length, tool_calls, ...), most frequent first; empty
        when the records carry none (a plain HTTP API, older records)."""
        ok = self.succeeded()
        out = {
            self.finish_names[code]: int(np.count_nonzero(ok & (self.finish_code == code)))
            for code in np.unique(self.finish_code[ok]).tolist()
            if code >= 0
        }
        return dict(sorted(out.items(), key=lambda item: -item[1]))

    def unknown(self) -> NDArray[np.bool_]:
        """Counted, and neither a success, an error nor a timeout: cancelled in flight when the stage or replay
        stopped (sent, never answered), or a record that says nothing of its outcome. A PASS must hold even if
        every one of them failed (kfchaos.verdict.checks)."""
        return self._mask("unknown", lambda: self.counted() & ~self.succeeded() & ~self.failed() & ~self.timed_out())

    def cut_waited(self) -> NDArray[np.float64]:
        """How long each request cut in flight had waited for its answer when it was cut (ended - sent); NaN for
        every other request. An unknown request, `cancelled`, with both times recorded: its latency is
        right-censored there (docs/verdict.md, "Requests cut in flight")."""

        def compute() -> NDArray[np.float64]:
            cut = self.unknown() & (self.error == CANCELLED) & np.isfinite(self.sent) & np.isfinite(self.ended)
            return np.where(cut, np.maximum(self.ended - self.sent, 0.0), np.nan)

        return self._floats("cut_waited", compute)

    def latency_floor(self) -> NDArray[np.float64]:
        """The least latency each unknown request can have, one per unknown request in record order: the time a
        request cut in flight waited, 0 for one that says nothing of its outcome. A latency check counts one whose
        floor is already beyond its limit as beyond it (kfchaos.verdict.checks.tail_check)."""
        return np.nan_to_num(self.cut_waited()[self.unknown()], nan=0.0)

    def ttft_floor(self) -> NDArray[np.float64]:
        """The same for time to first token: a stream cut after its first token has its TTFT recorded (known, so its
        own floor); one cut before it waited at least as long for it as for the whole answer."""
        unknown = self.unknown()
        recorded = self.ttft[unknown]
        return np.where(np.isfinite(recorded), recorded, np.nan_to_num(self.cut_waited()[unknown], nan=0.0))

    def _floats(self, name: str, compute: Callable[[], NDArray[np.float64]]) -> NDArray[np.float64]:
        if name not in self._floats_cache:
            self._floats_cache[name] = compute()
        return self._floats_cache[name]


def _float(table: pa.Table, name: str) -> NDArray[np.float64]:
    column = table.column(name)
    if column.type != pa.float64():
        column = column.cast(pa.float64(), safe=False)  # int64 beyond 2**53: rounded, then range-checked
    return np.asarray(column.to_numpy(), dtype=np.float64)


def _dictionary_codes(
    column: pa.ChunkedArray, code_of: Callable[[str], int], missing: int, dtype: type[np.signedinteger[Any]]
) -> NDArray[Any]:
    """A string column -> small ints, chunk by chunk through each chunk's dictionary (chunks may carry
    different ones), never materializing the strings; null and all-null chunks get `missing`."""
    out = np.full(len(column), missing, dtype=dtype)
    offset = 0
    for chunk in column.chunks:
        if chunk.null_count < len(chunk):
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.cast(pa.string()).dictionary_encode()
            lookup = np.array([code_of(str(v)) for v in chunk.dictionary.to_pylist()] + [missing])
            indices = chunk.indices.fill_null(len(lookup) - 1).to_numpy(zero_copy_only=False)
            out[offset : offset + len(chunk)] = lookup[indices].astype(dtype)
        offset += len(chunk)
    return out


def _error_codes(column: pa.ChunkedArray) -> NDArray[np.int8]:
    """Error kinds -> their index in ERROR_KINDS (an unknown kind counts as an HTTP error)."""
    return _dictionary_codes(column, lambda kind: _KIND_CODE.get(kind, HTTP), NO_ERROR, np.int8)


def from_table(
    table: pa.Table, source: str = "records", batches: BatchReader | None = None, repeated: list[str] | None = None
) -> Requests:
    """`repeated`: the identity rule's findings when the caller checked it first (kfchaos.records.repeated_requests)."""
    missing = [name for name in NEEDED if name not in table.column_names]
    if missing:
        raise RecordsError(
            f"{source}: column(s) {', '.join(missing)} missing; records must follow kfchaos.records.REQUEST_SCHEMA"
        )
    for name in (*NEEDED, *(("ended",) if "ended" in table.column_names else ())):
        want = REQUEST_SCHEMA.field(name).type
        have = table.schema.field(name).type
        numeric_ok = pa.types.is_integer(have) or pa.types.is_floating(have)
        if name == "error":
            ok = pa.types.is_dictionary(have) or pa.types.is_string(have) or pa.types.is_null(have)
        elif name == "fault_active":
            ok = pa.types.is_boolean(have)
        else:
            ok = numeric_ok or pa.types.is_null(have)
        if not ok:
            raise RecordsError(f"{source}: column {name} has type {have}, expected {want}")
    stage = table.column("stage")
    if stage.null_count:
        raise RecordsError(f"{source}: column stage has {stage.null_count} null value(s); every record needs its stage")
    problems = impossible_data(table, batches, identity=repeated is None) + (repeated or [])
    if problems:
        # Never judged: each of these turned a true FAIL into PASS (issue 11 §4). An input error, exit 3.
        raise RecordsError(f"{source}: impossible records: " + "; ".join(problems))
    return Requests(
        stage=np.asarray(stage.cast(pa.int16()).to_numpy(), dtype=np.int16),
        intended=_float(table, "intended"),
        sent=_float(table, "sent"),
        status=_float(table, "status"),
        error=_error_codes(table.column("error")),
        latency=_float(table, "latency"),
        ttft=_float(table, "ttft"),
        itl_p99=_float(table, "itl_p99"),
        tpot=_float(table, "tpot"),
        fault_active=np.asarray(table.column("fault_active").fill_null(False).to_numpy(), dtype=np.bool_),
        injected=injected_mask(table),
        fault_code=(faults := _fault_codes(table))[0],
        fault_names=faults[1],
        finish_code=(finish := _name_codes(table, "finish_reason"))[0],
        finish_names=finish[1],
        model_code=(models := _name_codes(table, "model"))[0],
        model_names=models[1],
        ended=_float(table, "ended") if "ended" in table.column_names else np.full(table.num_rows, np.nan),
    )


def _name_codes(table: pa.Table, column: str) -> tuple[NDArray[np.int16], tuple[str, ...]]:
    """Codes and names of a dictionary column of names (finish_reason, model: absent before records version 4;
    the records schema keeps at most 2**15 names, two bytes a record)."""
    if column not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int16), ()
    names: dict[str, int] = {}

    def code_of(name: str) -> int:
        if name not in names and len(names) >= MAX_FAULT_NAMES:
            raise RecordsError(f"column {column} names over {MAX_FAULT_NAMES} distinct values")
        return names.setdefault(name, len(names))

    return _dictionary_codes(table.column(column), code_of, -1, np.int16), tuple(names)


def _fault_codes(table: pa.Table) -> tuple[NDArray[np.int32], tuple[str, ...]]:
    """fault_code and fault_names from the records' fault_request column (absent in older records)."""
    if "fault_request" not in table.column_names:
        return np.full(table.num_rows, -1, dtype=np.int32), ()
    names: dict[str, int] = {}

    def code_of(name: str) -> int:
        if name not in names and len(names) >= MAX_FAULT_NAMES:
            raise RecordsError(
                f"column fault_request names over {MAX_FAULT_NAMES} distinct faults (the records schema's int16 "
                "dictionary); a replay's records name only the experiment's faults"
            )
        return names.setdefault(name, len(names))

    return _dictionary_codes(table.column("fault_request"), code_of, -1, np.int32), tuple(names)


def injected_mask(table: pa.Table) -> NDArray[np.bool_]:
    """Rows a traffic-side fault sent: fault_request set, or long_context (records from before fault_request)."""
    mask = np.zeros(table.num_rows, dtype=np.bool_)
    if "long_context" in table.column_names:
        mask |= np.asarray(table.column("long_context").fill_null(False).to_numpy(zero_copy_only=False), dtype=np.bool_)
    if "fault_request" in table.column_names:
        mask |= ~np.asarray(table.column("fault_request").is_null().to_numpy(zero_copy_only=False), dtype=np.bool_)
    return mask


def _one_run(path: Path, dataset: ds.FileSystemDataset) -> None:
    """A records folder holds one run: refused when two of its files name different runs (their Parquet
    metadata) or hold the same stage and shard (a run writes each (stage, shard) once, in one file or merged), as
    two runs' records copied into one folder do. Concatenated, they would be judged as one run. The parts one
    replay wrote as it went (the same SPOOL_KEY) are one file here."""
    files = list(dataset.files)
    if len(files) < 2:
        return
    runs: dict[str, str] = {}
    seen: dict[tuple[int, int], tuple[str, bytes]] = {}
    for name in files:
        fragment = pq.ParquetFile(name)
        metadata = fragment.schema_arrow.metadata or {}
        run_id = metadata.get(RUN_ID_KEY)
        source = metadata.get(SPOOL_KEY, name.encode())
        if run_id is not None:
            runs.setdefault(run_id.decode(errors="replace"), name)
        wanted = [c for c in ("stage", "shard") if c in fragment.schema_arrow.names]
        if "stage" not in wanted:
            continue
        table = fragment.read(columns=wanted).group_by(wanted).aggregate([])
        shards = table.column("shard").to_pylist() if "shard" in wanted else [0] * table.num_rows
        for stage, shard in zip(table.column("stage").to_pylist(), shards, strict=True):
            other, other_source = seen.setdefault((stage, shard), (name, source))
            if other_source != source:
                raise RecordsError(
                    f"{path}: holds two runs' records: {other} and {name} both hold stage {stage} shard {shard}; "
                    "give one run's records"
                )
    if len(runs) > 1:
        listed = "; ".join(f"{run} ({name})" for run, name in sorted(runs.items()))
        raise RecordsError(f"{path}: holds records of {len(runs)} runs: {listed}; give one run's records")


def load_requests(source: pa.Table | str | Path) -> Requests:
    """Records from a pyarrow Table or a Parquet file (or a folder of them), reading only the needed columns."""
    if isinstance(source, pa.Table):
        return from_table(source)
    path = Path(source)
    parquetguard.check(path)  # rows, columns and expanded sizes from the footer, before any data is read
    try:
        dataset = ds.dataset(path, format="parquet")  # one file, or a folder of per-stage/per-shard files
        _one_run(path, dataset)
        names = set(dataset.schema.names)

        def batches(wanted: tuple[str, ...]) -> Iterator[pa.RecordBatch] | None:
            # The id columns are the largest in the file: streamed batch by batch, only for the identity checks.
            if not set(wanted) <= names:
                return None
            return iter(dataset.to_batches(columns=list(wanted), batch_size=ID_BATCH_ROWS))

        # Before the columns are read: the identity check's keys are not held beside them (the peak of memory).
        repeated = repeated_requests(dataset.schema.empty_table(), batches)
        table = dataset.to_table(columns=[n for n in (*NEEDED, *OPTIONAL) if n in names])
        return from_table(table, str(path), batches, repeated)
    except FileNotFoundError:
        raise RecordsError(f"{path}: no such records file") from None
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RecordsError(f"{path}: cannot read as Parquet records: {message}") from None
