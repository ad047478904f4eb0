"""Per-request records kept as typed columns while a stage runs, then written as Arrow/Parquet.

Columns are `array` buffers (8 bytes a float, 2 an int16...) and ids are packed into one byte buffer,
so a recorded request costs about 150 bytes instead of the ~1 KB a Python object per request would.
The table has exactly kfchaos.records.REQUEST_SCHEMA; missing values are null, never 0.
"""

from __future__ import annotations

import concurrent.futures
import math
import shutil
import uuid
from array import array
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos import parquetguard, safefile
from kfchaos.errors import KfchaosError
from kfchaos.records import ERROR_KINDS, REQUEST_SCHEMA, SPOOL_KEY

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
INCOMPLETE = {b"kfchaos.records.complete": b"false"}


class Spool:
    """Records written as they are taken, so that a kill or a full disk keeps what was measured: every SPOOL_S
    the rows since the last part go to a new, complete Parquet file in `<out>.partial/` (written by one worker
    thread, off the sender's loop; each marked `kfchaos.records.complete: false` in its schema metadata). When
    the stage's whole file is written the folder is removed; when it cannot be, the folder stays and says what
    was measured (a folder of Parquet files is records to `verdict` and `replay --merge`)."""

    def __init__(self, out: str | Path) -> None:
        self.interval = SPOOL_S  # read now, not at import: a test may shorten it
        self.folder = Path(f"{out}.partial")
        self.folder.mkdir(parents=True, exist_ok=True)
        # Every part names this spool: the parts together are one (stage, shard) of one replay, which the verdict's
        # one-run check (kfchaos.verdict.requests) must not take for two runs' records of the same stage.
        self.metadata = {**INCOMPLETE, SPOOL_KEY: uuid.uuid4().hex.encode()}
        self.written = 0
        self.parts = 0
        self.errors: list[str] = []
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kfchaos-spool")

    def flush(self, recorder: Recorder) -> None:
        """Hand the rows taken since the last flush to the writer (a copy: cheap, on the caller's thread)."""
        end = len(recorder)
        if end == self.written:
            return
        part = recorder.sliced(self.written, end)
        self.written = end
        self.parts += 1
        self._worker.submit(self._write, part, self.folder / f"part-{self.parts:05d}.parquet")

    def _write(self, part: Recorder, path: Path) -> None:
        table = part.table()
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **self.metadata})
        try:
            safefile.replace_with(path, lambda temporary: pq.write_table(table, temporary))
        except OSError as exc:  # a full disk: the parts before stay; the error is reported at the end
            self.errors.append(f"{path.name}: {exc.strerror or exc}")

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    def discard(self) -> None:
        """The whole file is written: the parts are not needed."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    safefile.replace_with(path, lambda temporary: pq.write_table(table, temporary))
    return path


def read_records(paths: list[str | Path]) -> pa.Table:
    """Shard files of one stage, merged into one table in intended-send order."""
    tables = []
    for path in paths:
        parquetguard.check(path)
        missing = [name for name in REQUEST_SCHEMA.names if name not in pq.read_schema(path).names]
        # pyarrow would fill them with nulls, and missing data must never look like data; except `ended`, added in
        # records version 3, whose null already means "not known" (the report then bounds the time instead).
        if [name for name in missing if name not in LATER_COLUMNS]:
            raise KfchaosError(f"records file {path}: not kfchaos request records; missing columns {missing}")
        tables.append(pq.read_table(path, schema=REQUEST_SCHEMA))
    return pa.concat_tables(tables).sort_by("intended") if tables else REQUEST_SCHEMA.empty_table()
