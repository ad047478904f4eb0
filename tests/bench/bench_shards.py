"""Sharded replay (`make bench BENCH=shards`): what a shard costs besides the requests it sends, and the merge.

1. Planning per shard: every shard reads and hashes the whole recording and keeps its 1/n. Time to stream
   shard 0's plan of a JSONL file for n = 1, 4, 16 (no network), against n = 1 in the same run.
2. Merge: n shard files of N records in all (REQUEST_SCHEMA, time-ordered per shard as the replayer writes
   them) merged by `kfchaos.traffic.merge.merge_records` (overlap checks, stable sort, one Parquet file),
   against the reference of pyarrow reading the same files, concatenating and writing them, in the same run.
   Each in a fresh process, so the peak RSS is its own.

The rate and the concurrent streams one shard sustains are one replay process's: `make bench BENCH=replay`.
Environment: KFCHAOS_BENCH_SHARD_RECORDS (N, default 2,000,000), KFCHAOS_BENCH_SHARD_FILES (n, default 8),
KFCHAOS_BENCH_PLAN_LINES (recording size for step 1, default 300,000).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kfchaos.records import REQUEST_SCHEMA

RECORDS = int(os.environ.get("KFCHAOS_BENCH_SHARD_RECORDS", "2000000"))
FILES = int(os.environ.get("KFCHAOS_BENCH_SHARD_FILES", "8"))
PLAN_LINES = int(os.environ.get("KFCHAOS_BENCH_PLAN_LINES", "300000"))

CHILD = r"""
import json, resource, sys, time
import pyarrow as pa, pyarrow.parquet as pq
mode, out, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
started = time.perf_counter()
if mode == "reference":
    table = pa.concat_tables([pq.read_table(p) for p in parts])
    pq.write_table(table, out)
else:
    from kfchaos.traffic.merge import merge_records
    table = merge_records(parts, out)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "rows": table.num_rows, "rss_kib": peak}))
"""


def shard_table(shard: int, shards: int, total: int, rng: np.random.Generator) -> pa.Table:
    """Shard `shard`'s records of a stage of `total` requests, in intended-time order."""
    numbers = np.arange(shard, total, shards)
    m = len(numbers)
    intended = 1.7e9 + np.sort(rng.uniform(0, 1200, m))
    latency = rng.lognormal(-1.5, 0.6, m)
    ids = pc.binary_join_element_wise("r", pc.cast(pa.array(numbers), pa.string()), "")
    columns = {
        "stage": pa.array(np.full(m, 60, np.int16)),
        "shard": pa.array(np.full(m, shard, np.int16)),
        "request_id": ids,
        "trace_id": pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), 32, "0"),
        "fault_active": pa.array(np.ones(m, bool)),
        "intended": pa.array(intended),
        "sent": pa.array(intended + rng.exponential(0.002, m)),
        "status": pa.array(np.full(m, 200, np.int16)),
        "error": pa.DictionaryArray.from_arrays(pa.nulls(m, pa.int8()), pa.array(["http"])),
        "latency": pa.array(latency),
        "latency_intended": pa.array(latency + 0.002),
        "ttft": pa.array(latency * 0.2),
        "itl_mean": pa.array(np.full(m, 0.02)),
        "itl_p99": pa.array(np.full(m, 0.05)),
        "itl_max": pa.array(np.full(m, 0.08)),
        "tpot": pa.array(np.full(m, 0.021)),
        "prompt_tokens": pa.array(rng.integers(10, 4000, m).astype(np.int32)),
        "output_tokens": pa.array(rng.integers(10, 500, m).astype(np.int32)),
        "bytes_sent": pa.array(rng.integers(100, 20000, m)),
        "bytes_received": pa.array(rng.integers(100, 20000, m)),
        "long_context": pa.array(np.zeros(m, bool)),
        "connect": pa.array(np.zeros(m)),
    }
    for field in REQUEST_SCHEMA:  # columns added to the schema later (e.g. fault_request): all null here
        if field.name not in columns:
            columns[field.name] = pa.nulls(m, field.type)
    return pa.table([columns[f.name] for f in REQUEST_SCHEMA], schema=REQUEST_SCHEMA)


def _merge_child(mode: str, out: Path, parts: list[Path]) -> dict[str, float]:
    argv = [sys.executable, "-c", CHILD, mode, str(out), *map(str, parts)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def plan_per_shard(tmp: Path) -> None:
    from kfchaos.traffic.api import plan_stage
    from kfchaos.traffic.settings import ReplaySettings

    path = tmp / "recording.jsonl"
    with path.open("w") as stream:
        for start in range(0, PLAN_LINES, 10000):
            stream.write(
                "".join(
                    f'{{"id":"r{i}","timestamp":{i / 1000:.6f},"path":"/"}}\n'
                    for i in range(start, min(PLAN_LINES, start + 10000))
                )
            )
    base = None
    for shards in (1, 4, 16):
        settings = ReplaySettings(stage=100, source=str(path), shard=0, shards=shards)
        started = time.perf_counter()
        kept = sum(1 for _ in plan_stage(settings).schedule())
        seconds = time.perf_counter() - started
        base = base or seconds
        print(f"plan of shard 0/{shards}: {PLAN_LINES:,} lines read, {kept:,} kept in {seconds:.2f}s "
              f"({PLAN_LINES / seconds:,.0f} lines/s; {seconds / base:.2f}x the unsharded plan's time, "
              f"{seconds / max(1, kept) * 1e6:.1f} us per request this shard sends)")  # fmt: skip


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="kfchaos-bench-shards-") as name:
        tmp = Path(name)
        plan_per_shard(tmp)
        rng = np.random.default_rng(11)
        parts = []
        started = time.perf_counter()
        for shard in range(FILES):
            parts.append(tmp / f"shard-{shard}.parquet")
            pq.write_table(shard_table(shard, FILES, RECORDS, rng), parts[-1])
        size = sum(p.stat().st_size for p in parts)
        print(f"shard files: {FILES} files, {RECORDS:,} records, {size / 2**20:.0f} MiB Parquet, "
              f"written in {time.perf_counter() - started:.1f}s")  # fmt: skip
        reference = _merge_child("reference", tmp / "reference.parquet", parts)
        merged = _merge_child("merge", tmp / "merged.parquet", parts)
    mib = 1024  # ru_maxrss is in KiB
    for label, result in (
        ("reference  pyarrow read + concat + write", reference),
        ("merge      merge_records", merged),
    ):
        print(f"{label}: {result['seconds']:.2f}s ({result['rows'] / result['seconds']:,.0f} records/s), "
              f"peak RSS {result['rss_kib'] / mib:.0f} MiB")  # fmt: skip
    print(f"ratio      merge / reference: time {merged['seconds'] / reference['seconds']:.1f}x, "
          f"memory {merged['rss_kib'] / reference['rss_kib']:.1f}x; "
          f"{merged['seconds'] / RECORDS * 1e6:.2f} us per record")  # fmt: skip
