"""Run folders of one experiment over many nights and pipeline versions, made by the project's own writers: each
run's records (tests/verdict/builders: real pyarrow tables of the records schema) are judged by `kfchaos verdict`'s
own code (kfchaos.verdict.files.build_from_files) and written with kfchaos.rundir.writing.write, sealed and signed
as every run folder is. The target's speed is what a test changes: a slower target (a larger latency scale) is the
planted regression; per-run variation comes from each night's own random draw."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from kfchaos.metrics.names import OOM_KILLS, RESTARTS
from kfchaos.metrics.snapshot import MetricsSnapshot, Series
from kfchaos.rundir import writing
from kfchaos.verdict.files import build_from_files
from tests.verdict.builders import concat, experiment_text, records
from tests.verdict.fixtures import baseline

NAME = "verdict-test"  # tests/verdict/builders.EXPERIMENT's metadata.name
STAGES = (10, 30, 60)
STAGE_S = 20.0
RATE = 100.0  # at 100 %: 200, 600 and 1200 requests in the stages
NIGHT = 86_400.0
FIRST_NIGHT = 1_796_000_000.0  # 2026-11-30T02:13:20Z
SLO = "p99_drift_max: 100%\np99_max: 1s\nttft_p99_max: 400ms\nmin_samples: 100"


@dataclass(frozen=True)
class Night:
    """One nightly run: the pipeline version it ran, the target's latency scale (seconds, exponential), whether the
    target was OOM-killed in the last stage."""

    version: str
    scale: float
    oom_kill: bool = False


def write_night(root: Path, work: Path, index: int, night: Night) -> Path:
    """runs/<run-id>/ for one night; returns the folder."""
    rng = np.random.default_rng(1000 + index)
    start = FIRST_NIGHT + index * NIGHT
    tables = []
    for i, stage in enumerate(STAGES):
        n = int(RATE * stage / 100 * STAGE_S)
        latency = rng.exponential(night.scale, n)
        tables.append(records(stage, latency, start=start + i * STAGE_S, rate=n / STAGE_S, ttft=latency * 0.25))
    inputs = work / f"night-{index}"
    inputs.mkdir(parents=True)
    text = experiment_text(SLO, stages=list(STAGES), stage_duration=f"{STAGE_S:g}s", rate=RATE)
    text = text.replace("version: 1.0.0", f"version: {night.version}")
    (inputs / "exp.yaml").write_text(text)
    pq.write_table(concat(*tables), inputs / "records.parquet")
    baseline(p99=0.4).write(inputs / "baseline.yaml")
    times = np.arange(start - 10, start + len(STAGES) * STAGE_S + 30, 5.0)
    kills = np.where(night.oom_kill & (times >= start + 2.5 * STAGE_S), 1.0, 0.0)
    metrics = MetricsSnapshot(
        source="http://127.0.0.1:9090",
        grace=5.0,
        series={
            OOM_KILLS: Series(OOM_KILLS, times, kills, "counter"),
            RESTARTS: Series(RESTARTS, times, kills, "counter"),
        },
    )
    metrics.write(inputs / "metrics.json")
    verdict = build_from_files(
        experiment=inputs / "exp.yaml",
        records=inputs / "records.parquet",
        baseline=inputs / "baseline.yaml",
        metrics=inputs / "metrics.json",
    )
    folder = writing.write(
        root / f"nightly-{index:02d}",
        experiment_text=text,
        records=inputs / "records.parquet",
        verdict=verdict.to_dict(),
        baseline_text=(inputs / "baseline.yaml").read_text(),
        baseline_path=inputs / "baseline.yaml",
        metrics=json.loads((inputs / "metrics.json").read_text()),
        info={
            "source": "tests",
            "pipeline": {"name": NAME, "version": night.version},
            "started_at": start,
            "finished_at": start + len(STAGES) * STAGE_S,
        },
    )
    return folder.path


def write_nights(root: Path, work: Path, nights: list[Night]) -> list[Path]:
    return [write_night(root, work, i, night) for i, night in enumerate(nights)]
