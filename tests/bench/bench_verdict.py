"""Verdict over 10 million request records (target: < 10 s, < 2 GiB).

Writes a Parquet file of synthetic records in REQUEST_SCHEMA (5 stages, 2 % errors, lognormal latencies),
then, in a fresh subprocess so the memory figure is the verdict's own, times (a) reading the columns the
verdict needs with pyarrow -- the reference -- and (b) the whole `evaluate()` from the file. Prints
seconds, peak RSS and the ratio to the reference. `KFCHAOS_BENCH_RECORDS` changes the count.
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

STAGES = (10, 30, 60, 90, 100)

CHILD = r"""
import json, resource, sys, time
import pyarrow.parquet as pq
from kfchaos.validate import parse_experiment
from kfchaos.verdict import evaluate
from kfchaos.verdict.requests import NEEDED
path, experiment_text, mode = sys.argv[1], sys.argv[2], sys.argv[3]
started = time.perf_counter()
if mode == "read":
    table = pq.read_table(path, columns=list(NEEDED))
    rows = table.num_rows
else:
    verdict = evaluate(path, parse_experiment(experiment_text, "bench.yaml"))
    rows = sum(s.requests for s in verdict.stages)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "rows": rows}))
"""

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {name: bench, version: 1.0.0, owner: bench}
spec:
  target: {namespace: serving, selector: {labels: {app: x}}, endpoint: "http://127.0.0.1:1"}
  traffic: {synthetic: {rate: 1000}, stages: [10, 30, 60, 90, 100]}
  slo: {p99_max: 2s, ttft_p99_max: 1s}
  abort:
    - {metric: error_rate, above: 5%, window: 30s, consecutive: 2}
    - {metric: p99_latency, above: 5s, window: 30s}
  baseline: {file: baselines/bench.yaml}
"""


def write_records(path: Path, n: int) -> None:
    rng = np.random.default_rng(7)
    per_stage = n // len(STAGES)
    writer = pq.ParquetWriter(path, REQUEST_SCHEMA)
    for index, stage in enumerate(STAGES):
        m = per_stage if index < len(STAGES) - 1 else n - per_stage * (len(STAGES) - 1)
        ids = pa.array(np.arange(index * per_stage, index * per_stage + m))
        intended = 1.7e9 + index * 1200 + np.sort(rng.uniform(0, 1200, m))
        failed = rng.random(m) < 0.02
        latency = rng.lognormal(-1.5, 0.6, m)
        error = pa.DictionaryArray.from_arrays(
            pa.array(np.where(failed, 0, -1).astype(np.int8), mask=~failed), pa.array(["http"])
        )
        table = pa.table(
            {
                "stage": pa.array(np.full(m, stage, np.int16)),
                "shard": pa.array(np.zeros(m, np.int16)),
                "request_id": pc.cast(ids, pa.string()),
                "trace_id": pc.utf8_lpad(pc.cast(ids, pa.string()), 32, "0"),
                "fault_active": pa.array(np.ones(m, bool)),
                "intended": pa.array(intended),
                "sent": pa.array(intended + rng.exponential(0.002, m)),
                "status": pa.array(np.where(failed, 503, 200).astype(np.int16)),
                "error": error,
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
                "fault_request": pa.nulls(m, pa.dictionary(pa.int16(), pa.string())),
                "ended": pa.array(intended + 0.002 + latency),
                "finish_reason": pa.nulls(m, pa.dictionary(pa.int8(), pa.string())),
                "model": pa.nulls(m, pa.dictionary(pa.int16(), pa.string())),
            },
            schema=REQUEST_SCHEMA,
        )
        writer.write_table(table, row_group_size=1_000_000)
    writer.close()


def _child(path: Path, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), EXPERIMENT, mode], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run() -> None:
    n = int(os.environ.get("KFCHAOS_BENCH_RECORDS", "10000000"))
    with tempfile.TemporaryDirectory(prefix="kfchaos-bench-verdict-") as tmp:
        path = Path(tmp) / "records.parquet"
        started = time.perf_counter()
        write_records(path, n)
        size = path.stat().st_size
        print(f"records: {n:,} rows, {size / 2**20:.0f} MiB Parquet, written in {time.perf_counter() - started:.1f}s")
        read = _child(path, "read")
        verdict = _child(path, "verdict")
    gib = 2**20  # ru_maxrss is in KiB
    time_ratio = verdict["seconds"] / read["seconds"]
    memory_ratio = verdict["rss_kib"] / read["rss_kib"]
    print(
        f"reference  pyarrow read of needed columns: {read['seconds']:.2f}s, peak RSS {read['rss_kib'] / gib:.2f} GiB"
    )
    print(
        f"verdict    evaluate() from the file: {verdict['seconds']:.2f}s, peak RSS {verdict['rss_kib'] / gib:.2f} GiB"
    )
    print(f"ratio      verdict / read: time {time_ratio:.1f}x, memory {memory_ratio:.1f}x")
    within = verdict["seconds"] < 10 and verdict["rss_kib"] < 2 * gib
    verdict_rows = int(verdict["rows"])
    print(f"target     < 10 s and < 2 GiB: {'met' if within else 'NOT met'} ({verdict_rows:,} rows judged)")
