"""Per-request records kept as typed columns while a stage runs, then written as Arrow/Parquet.

Columns are `array` buffers (8 bytes a float, 2 an int16...) and ids are packed into one byte buffer,
so a recorded request costs about 150 bytes instead of the ~1 KB a Python object per request would.
The table has exactly kfchaos.records.REQUEST_SCHEMA; missing values are null, never 0.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import math
import os
import re
import uuid
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos import parquetguard, safefile
from kfchaos.errors import KfchaosError
from kfchaos.records import COMPLETE_KEY, CUT, END_COMPLETE, END_KEY, ERROR_KINDS, REQUEST_SCHEMA, SPOOL_KEY

NAN = math.nan
ERROR_CODE = {kind: i for i, kind in enumerate(ERROR_KINDS)}


# A server names the finish reason: a hostile one could name a new one every time. The names kept per recorder are
# bounded; beyond them a reason is recorded as OTHER_NAME (never mistaken for "stop" or "length").
MAX_FINISH_NAMES = 32
MAX_MODEL_NAMES = 256  # model names answered, likewise
OTHER_NAME = "(other)"


def _code(names: dict[str, int], name: str, limit: int) -> int:
    if name not in names and len(names) >= limit - 1:
        name = OTHER_NAME
    return names.setdefault(name, len(names))


def _dictionary(codes: array, names: dict[str, int], index_type: pa.DataType, n: int) -> pa.DictionaryArray:
    values = np.frombuffer(codes, dtype=np.dtype(codes.typecode)) if n else np.zeros(0, dtype=np.int8)
    return pa.DictionaryArray.from_arrays(
        pa.array(values, type=index_type, mask=values < 0), pa.array(list(names), type=pa.string())
    )


class Recorder:
    def __init__(self, stage: int, shard: int) -> None:
        self.stage = stage
        self.shard = shard
        self.ids = bytearray()
        self.id_ends = array("q")
        self.trace = bytearray()  # 16 bytes a request
        self.fault = array("b")
        self.long_context = array("b")
        self.fault_request = array("h")  # -1: traffic; else index in fault_names
        self.fault_names: dict[str, int] = {}
        self.intended = array("d")
        self.sent = array("d")
        self.status = array("h")  # -1: none
        self.error = array("b")  # -1: none, else index in ERROR_KINDS
        self.latency = array("d")
        self.ttft = array("d")
        self.itl_mean = array("d")
        self.itl_p99 = array("d")
        self.itl_max = array("d")
        self.tpot = array("d")
        self.prompt_tokens = array("i")  # -1: unknown
        self.output_tokens = array("i")
        self.bytes_sent = array("q")  # -1: not sent
        self.bytes_received = array("q")
        self.connect = array("d")
        self.ended = array("d")
        self.finish = array("b")  # -1: none; else index in finish_names
        self.finish_names: dict[str, int] = {}
        self.model = array("h")  # -1: none; else index in model_names
        self.model_names: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.intended)

    def add(
        self,
        record_id: str,
        trace_id: bytes,
        intended: float,
        sent: float = NAN,
        status: int = -1,
        error: str | None = None,
        latency: float = NAN,
        ttft: float = NAN,
        itl: tuple[float, float, float] = (NAN, NAN, NAN),
        tpot: float = NAN,
        prompt_tokens: int = -1,
        output_tokens: int = -1,
        bytes_sent: int = -1,
        bytes_received: int = -1,
        long_context: bool = False,
        fault_active: bool = False,
        connect: float = NAN,
        fault_request: str | None = None,
        ended: float = NAN,
        finish_reason: str | None = None,
        model: str | None = None,
    ) -> None:
        self.ids += record_id.encode()
        self.id_ends.append(len(self.ids))
        self.trace += trace_id
        self.fault.append(fault_active)
        self.long_context.append(long_context)
        self.intended.append(intended)
        self.sent.append(sent)
        self.status.append(status)
        self.error.append(-1 if error is None else ERROR_CODE[error])
        self.latency.append(latency)
        self.ttft.append(ttft)
        self.itl_mean.append(itl[0])
        self.itl_p99.append(itl[1])
        self.itl_max.append(itl[2])
        self.tpot.append(tpot)
        self.prompt_tokens.append(prompt_tokens)
        self.output_tokens.append(output_tokens)
        self.bytes_sent.append(bytes_sent)
        self.bytes_received.append(bytes_received)
        self.connect.append(connect)
        self.ended.append(ended)
        if fault_request is None:
            self.fault_request.append(-1)
        else:
            self.fault_request.append(self.fault_names.setdefault(fault_request, len(self.fault_names)))
        self.finish.append(-1 if finish_reason is None else _code(self.finish_names, finish_reason, MAX_FINISH_NAMES))
        self.model.append(-1 if model is None else _code(self.model_names, model, MAX_MODEL_NAMES))

    def sliced(self, start: int, end: int) -> Recorder:
        """A copy of rows [start, end) (each column copied: the original keeps growing while the copy is
        written from another thread)."""
        part = Recorder(self.stage, self.shard)
        for name, value in vars(self).items():
            if isinstance(value, array) and name != "id_ends":
                setattr(part, name, value[start:end])
        ends = self.id_ends[start:end]
        first = self.id_ends[start - 1] if start else 0
        part.id_ends = array("q", (e - first for e in ends))
        part.ids = bytearray(self.ids[first : (ends[-1] if len(ends) else first)])
        part.trace = bytearray(self.trace[16 * start : 16 * end])
        part.fault_names = dict(self.fault_names)
        part.finish_names = dict(self.finish_names)
        part.model_names = dict(self.model_names)
        return part

    def nbytes(self) -> int:
        """Memory held by the columns (for the bytes-per-record benchmark)."""
        columns = [v for v in vars(self).values() if isinstance(v, array | bytearray)]
        return sum(c.buffer_info()[1] * c.itemsize if isinstance(c, array) else len(c) for c in columns)

    def table(self) -> pa.Table:
        n = len(self)

        def floats(values: array) -> pa.Array:
            data = np.frombuffer(values, dtype=np.float64) if n else np.zeros(0)
            return pa.array(data, type=pa.float64(), mask=np.isnan(data))

        def ints(values: array, arrow_type: pa.DataType) -> pa.Array:
            data = np.frombuffer(values, dtype=np.dtype(values.typecode)) if n else np.zeros(0, dtype=np.int64)
            return pa.array(data, type=arrow_type, mask=data < 0)

        ends = np.frombuffer(self.id_ends, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], ends]).astype(np.int32)
        request_ids = pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(bytes(self.ids)))
        trace = np.frombuffer(bytes(self.trace), dtype=np.uint8).reshape(-1, 16) if n else np.zeros((0, 16), np.uint8)
        trace_ids = pa.array([row.tobytes().hex() for row in trace], type=pa.string())
        intended = np.frombuffer(self.intended, dtype=np.float64) if n else np.zeros(0)
        sent = np.frombuffer(self.sent, dtype=np.float64) if n else np.zeros(0)
        latency = np.frombuffer(self.latency, dtype=np.float64) if n else np.zeros(0)
        latency_intended = latency + (sent - intended)
        errors = np.frombuffer(self.error, dtype=np.int8) if n else np.zeros(0, dtype=np.int8)
        error_column = pa.DictionaryArray.from_arrays(
            pa.array(errors, type=pa.int8(), mask=errors < 0), pa.array(list(ERROR_KINDS), type=pa.string())
        )
        fault_codes = np.frombuffer(self.fault_request, dtype=np.int16) if n else np.zeros(0, dtype=np.int16)
        columns = {
            "stage": pa.array(np.full(n, self.stage, dtype=np.int16)),
            "shard": pa.array(np.full(n, self.shard, dtype=np.int16)),
            "request_id": request_ids,
            "trace_id": trace_ids,
            "fault_active": pa.array(np.frombuffer(self.fault, dtype=np.int8).astype(bool) if n else [], pa.bool_()),
            "intended": pa.array(intended, type=pa.float64()),
            "sent": floats(self.sent),
            "status": ints(self.status, pa.int16()),
            "error": error_column,
            "latency": floats(self.latency),
            "latency_intended": pa.array(latency_intended, type=pa.float64(), mask=np.isnan(latency_intended)),
            "ttft": floats(self.ttft),
            "itl_mean": floats(self.itl_mean),
            "itl_p99": floats(self.itl_p99),
            "itl_max": floats(self.itl_max),
            "tpot": floats(self.tpot),
            "prompt_tokens": ints(self.prompt_tokens, pa.int32()),
            "output_tokens": ints(self.output_tokens, pa.int32()),
            "bytes_sent": ints(self.bytes_sent, pa.int64()),
            "bytes_received": ints(self.bytes_received, pa.int64()),
            "long_context": pa.array(
                np.frombuffer(self.long_context, dtype=np.int8).astype(bool) if n else [], pa.bool_()
            ),
            "connect": floats(self.connect),
            "fault_request": pa.DictionaryArray.from_arrays(
                pa.array(fault_codes, type=pa.int16(), mask=fault_codes < 0),
                pa.array(list(self.fault_names), type=pa.string()),
            ),
            "ended": floats(self.ended),
            "finish_reason": _dictionary(self.finish, self.finish_names, pa.int8(), n),
            "model": _dictionary(self.model, self.model_names, pa.int16(), n),
        }
        table = pa.table([columns[name] for name in REQUEST_SCHEMA.names], schema=REQUEST_SCHEMA)
        return table.sort_by("intended")


LATER_COLUMNS = ("ended", "finish_reason", "model")  # columns older records files lack, read as null

# How often a replay with an output file writes the records taken since the last part (kfchaos.traffic.engine).
SPOOL_S = 10.0
# Space held from the start of a replay in its parts folder, released when the disk fails: room for the last part
# (the rows since the part that failed, ~100 bytes a row: tens of thousands of rows) and for what the stage writes
# after it. A replay that cannot reserve it sends nothing.
RESERVE_BYTES = 4 << 20
RESERVE = ".reserve"  # hidden: Parquet datasets skip names that start with a dot


def _why(exc: OSError, name: str) -> str:
    """`ENOSPC (No space left on device) writing part-00003.parquet`: pyarrow's own IOError may carry the errno only
    in its message."""
    code = exc.errno
    if code is None:
        found = re.search(r"\[errno (\d+)\]", str(exc))
        code = int(found.group(1)) if found else None
    label = errno.errorcode.get(code, "") if code is not None else ""
    text = os.strerror(code) if code is not None else (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"{label} ({text}) writing {name}" if label else f"{text} writing {name}"


class Spool:
    """Records written as they are taken, in row groups, so that a kill or a full disk keeps what was measured:
    every SPOOL_S the rows since the last part go to a new, complete Parquet file (one row group) in `<out>.partial/`
    (written by one worker thread, off the sender's loop; each marked incomplete in its schema metadata,
    kfchaos.records.COMPLETE_KEY). A part that cannot be written (ENOSPC, EIO: any OSError) cuts the stage: `on_cut`
    is called (the engine stops sending), and nothing more is written until `finish`, which releases the space
    reserved at the start and writes every row not yet in a part as the last part, marked with how the replay ended
    (kfchaos.records.END_KEY). When the stage's whole file is written instead, the folder is removed."""

    def __init__(self, out: str | Path) -> None:
        self.interval = SPOOL_S  # read now, not at import: a test may shorten it
        self.out = Path(out)
        self.folder = Path(f"{out}.partial")
        # kfchaos's own folder, private (records are the run's evidence); the parts are made through it.
        self._folder = safefile.Folder.open(self.folder, private=True, own=True)
        # Every part names this spool: the parts together are one (stage, shard) of one replay, which the verdict's
        # one-run check (kfchaos.verdict.requests) must not take for two runs' records of the same stage.
        self.metadata = {COMPLETE_KEY: b"false", SPOOL_KEY: uuid.uuid4().hex.encode()}
        self.taken = 0  # rows handed to the writer
        self.kept = 0  # rows in parts written whole (set by the writer, in order)
        self.parts = 0
        self.cut: str | None = None  # why a part could not be written: the stage stopped sending then
        self.lost = 0  # rows not even the last part could hold
        self.on_cut: Callable[[], None] | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kfchaos-spool")
        self._reserve()

    def _reserve(self) -> None:
        try:
            with self._folder.stream(RESERVE) as handle:
                os.posix_fallocate(handle.fileno(), 0, RESERVE_BYTES)
        except OSError as exc:
            self._folder.remove(RESERVE)
            self.close()
            with contextlib.suppress(OSError):  # made just now, unless a killed replay left parts in it
                self.folder.rmdir()
            raise KfchaosError(
                f"{self.folder}: cannot reserve {RESERVE_BYTES >> 20} MiB for the records ({exc.strerror or exc}); "
                "the disk is full or nearly: nothing was sent"
            ) from None

    def flush(self, recorder: Recorder) -> None:
        """Hand the rows taken since the last flush to the writer (a copy: cheap, on the caller's thread). Nothing
        once the stage is cut: its remaining rows go to the last part."""
        end = len(recorder)
        if end == self.taken or self.cut is not None:
            return
        part = recorder.sliced(self.taken, end)
        self.taken = end
        self.parts += 1
        self._worker.submit(self._write_part, part, f"part-{self.parts:05d}.parquet", end)

    def _write_part(self, part: Recorder, name: str, end: int) -> None:
        if self.cut is not None:  # queued behind the part that failed: its rows go to the last part
            return
        try:
            self._write(part, name, {})
        except OSError as exc:
            self.cut = _why(exc, name)
            if self.on_cut is not None:
                self.on_cut()
            return
        self.kept = end

    def _write(self, part: Recorder, name: str, extra: dict[bytes, bytes]) -> None:
        table = part.table()
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **self.metadata, **extra})
        self._folder.write(name, lambda handle: pq.write_table(table, handle))

    def finish(self, recorder: Recorder, why: str | None = None) -> Path:
        """The last part: every row not in a part yet, marked complete, or cut (by `why`, else by the part that
        failed), written in the space reserved at the start. Returns where the records are: `<out>` (the folder
        renamed, when nothing stands there), else the `.partial` folder."""
        self._worker.shutdown(wait=True)
        self._folder.remove(RESERVE)
        why = why or self.cut
        end = END_COMPLETE if why is None else CUT + why
        self.parts += 1
        name = f"part-{self.parts:05d}.parquet"
        try:
            self._write(recorder.sliced(self.kept, len(recorder)), name, {END_KEY: end.encode()})
        except OSError as exc:  # not even the reserve held them: an empty part still says how the replay ended
            self.lost = len(recorder) - self.kept
            lost = f"{self.lost} row(s) could not be written ({_why(exc, name)})"
            mark = CUT + (f"{why}; {lost}" if why else lost)
            self._write(recorder.sliced(len(recorder), len(recorder)), name, {END_KEY: mark.encode()})
        self._folder.close()
        try:
            with safefile.Folder.open(self.folder.parent) as parent:
                if parent.exists(self.out.name):
                    return self.folder
                return parent.rename(self.folder.name, self.out.name)
        except OSError:
            return self.folder

    def mark_end(self, table: pa.Table, why: str) -> pa.Table:
        """The stage's whole table as this spool's one and last part, cut by `why` (a signal that stopped the
        replay): written as `<out>` like any whole file, it says the stage is not whole
        (kfchaos.records.unfinished_stages), and a verdict on it is INCONCLUSIVE."""
        end = {END_KEY: (CUT + why).encode()}
        return table.replace_schema_metadata({**(table.schema.metadata or {}), **self.metadata, **end})

    def close(self) -> None:
        self._worker.shutdown(wait=True)
        self._folder.close()

    def discard(self) -> None:
        """The whole file is written: the parts are not needed."""
        self.close()
        with safefile.Folder.open(self.folder.parent) as parent:
            parent.remove_tree(self.folder.name)


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    """The records file (private: the run's evidence), renamed into place when whole (kfchaos.safefile)."""
    return safefile.replace_with(path, lambda handle: pq.write_table(table, handle), private=True)


def read_records(paths: list[str | Path]) -> pa.Table:
    """Shard files of one stage, merged into one table in intended-send order."""
    tables = []
    for path in paths:
        parquetguard.check(path)
        # A folder: the parts a replay kept when its disk failed (Spool.finish).
        schema = pq.read_schema(path) if Path(path).is_file() else pq.ParquetDataset(path).schema
        missing = [name for name in REQUEST_SCHEMA.names if name not in schema.names]
        # pyarrow would fill them with nulls, and missing data must never look like data; except `ended`, added in
        # records version 3, whose null already means "not known" (the report then bounds the time instead).
        if [name for name in missing if name not in LATER_COLUMNS]:
            raise KfchaosError(f"records file {path}: not kfchaos request records; missing columns {missing}")
        tables.append(pq.read_table(path, schema=REQUEST_SCHEMA))
    return pa.concat_tables(tables).sort_by("intended") if tables else REQUEST_SCHEMA.empty_table()
