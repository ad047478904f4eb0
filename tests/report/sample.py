"""A realistic run to draw: three stages, a fault in effect from the second stage on, a tail that grows,
errors of several kinds, a stage with requests that never completed (P99 = infinity), and the cluster's
series (KV-cache usage, preemptions, GPU memory, a restart after an OOM kill)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos.baseline import ControlBaseline
from kfchaos.evidence.model import Bundle, Item
from kfchaos.metrics.names import GPU_MEMORY_USED, KV_CACHE_USAGE, OOM_KILLS, PREEMPTIONS, RESTARTS
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.rundir import writing
from tests.verdict.builders import concat, experiment_text, records
from tests.verdict.fixtures import baseline, exponential

START = 1_764_800_000.0  # 2025-12-03T22:13:20Z
STAGE_SECONDS = 40.0


@dataclass(frozen=True)
class SampleRun:
    experiment: Path
    records: Path
    baseline: Path
    metrics: Path

    def verdict_argv(self) -> list[str]:
        return ["verdict", "--experiment", str(self.experiment), "--records", str(self.records), "--baseline",
                str(self.baseline), "--metrics", str(self.metrics)]  # fmt: skip


def _stage(percent: int, index: int, scale: float, errors: dict[str, int], fault_from: float) -> pa.Table:
    n = int(percent * 0.1 * STAGE_SECONDS * 10)
    rate = n / STAGE_SECONDS
    latency = np.random.default_rng(percent).permutation(exponential(scale, n))
    error: list[str | None] = [None] * n
    at = 0
    for kind, count in errors.items():
        for i in np.linspace(n * 0.3, n * 0.9, count).astype(int):
            error[i] = kind
            latency[i] = np.nan
        at += count
    start = START + index * STAGE_SECONDS
    intended = start + np.arange(n) / rate
    return records(percent, latency, start=start, rate=rate, error=error, ttft=latency * 0.2,
                   fault_active=intended >= fault_from, send_lag=0.002)  # fmt: skip


def _control(root: Path) -> ControlBaseline:
    """A fault-free replay of the same stages, written beside the baseline as `kfchaos baseline control` does."""
    from kfchaos.control import measure_stage, sha256_file
    from kfchaos.verdict.requests import from_table

    path = root / "baseline.control.parquet"
    tables = {p: _stage(p, i, 0.07, {}, math.inf) for i, p in enumerate((10, 30, 60))}
    pq.write_table(concat(*tables.values()), path)
    return ControlBaseline(
        captured_at="2025-12-03T20:00:00Z",
        target="http://127.0.0.1:8000",
        stage_duration=STAGE_SECONDS,
        confidence=0.95,
        records=path.name,
        records_sha256=sha256_file(path),
        stages=[measure_stage(from_table(t), p, p * 0.1, 0.95) for p, t in tables.items()],
    )


def write_sample(root: Path, *, with_timeouts: bool = True, with_control: bool = False) -> SampleRun:
    root.mkdir(parents=True, exist_ok=True)
    fault_from = START + 0.5 * STAGE_SECONDS
    table = concat(
        _stage(10, 0, 0.08, {}, fault_from),
        _stage(30, 1, 0.10, {"connect": 3}, fault_from),
        _stage(60, 2, 0.16, {"timeout": 40, "reset": 5} if with_timeouts else {}, fault_from),
    )
    experiment = root / "exp.yaml"
    faults = "[{name: delay, type: network-delay, mode: one, duration: 2m, params: {latency: 50ms}}]"
    experiment.write_text(experiment_text("p99_drift_max: 30%\np99_max: 2s\nmin_samples: 100", stages=[10, 30, 60],
                                          faults=faults))  # fmt: skip
    pq.write_table(table, root / "records.parquet")
    baseline(p99=0.4, control=_control(root) if with_control else None).write(root / "baseline.yaml")
    times = np.arange(START - 10, START + 3 * STAGE_SECONDS + 10, 5.0)
    progress = (times - times[0]) / (times[-1] - times[0])
    kills = np.where(times >= START + 100, 1.0, 0.0)
    series = {
        KV_CACHE_USAGE: Series(KV_CACHE_USAGE, times, np.clip(0.2 + 0.85 * progress, 0, 1)),
        GPU_MEMORY_USED: Series(GPU_MEMORY_USED, times, 60_000 + 18_000 * progress),
        PREEMPTIONS: Series(PREEMPTIONS, times, np.floor(np.maximum(0, progress - 0.5) * 40), "counter"),
        OOM_KILLS: Series(OOM_KILLS, times, kills, "counter"),
        RESTARTS: Series(RESTARTS, times, kills, "counter"),
    }
    MetricsSnapshot(source="http://127.0.0.1:9090", series=series).write(root / "metrics.json")
    return SampleRun(experiment, root / "records.parquet", root / "baseline.yaml", root / "metrics.json")


def write_full_run_folder(out: Path, sample: SampleRun, evidence_items: int = 1) -> None:
    """A pipeline's run folder with every part it can hold: metrics, run state, stages, fault actions, audit record
    and `evidence_items` evidence files."""
    found = [
        Item(kind="previous-log", title=f"log {i}", target=f"serving/vllm-{i}/vllm").got("logs", "a log", "OOMKilled\n")
        for i in range(evidence_items)
    ]
    writing.write(
        out,
        experiment_text=sample.experiment.read_text(),
        records=sample.records,
        verdict={"kind": "kfchaos.Verdict", "version": 1, "status": "FAIL", "reasons": [], "checks": [], "stages": []},
        baseline_text=sample.baseline.read_text(),
        baseline_path=sample.baseline,
        metrics=json.loads(sample.metrics.read_text()),
        run_state={"faults_verified": True},
        stages=[{"step": "stage", "stage": 10, "detail": {"fault_actions": [{"call": "load", "status": 200}]}}],
        audit={"kind": "kfchaos.AuditRecord", "record_hash": "sha256:0"},
        evidence=Bundle(trigger=["oom"], window=(0.0, 1.0), items=found).to_dict(),
    )
