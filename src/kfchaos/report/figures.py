"""What the report plots, from the verdict JSON plus (when given) the records and the metric series."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kfchaos.metrics.names import KV_CACHE_USAGE, OOM_KILLS
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.verdict.requests import Requests, load_requests


@dataclass(frozen=True)
class StageFigures:
    stage: int
    status: str
    requests: int
    p50: float
    p90: float
    p99: float
    p99_interval: tuple[float, float] | None
    error_rate: float
    timeout_rate: float
    oom_kills: float


def stages_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Stage results from a `kfchaos.Verdict` (stages) or a pipeline `kfchaos.RunVerdict` (steps[].detail)."""
    if "stages" in document:
        return list(document["stages"])
    found = []
    for step in document.get("steps", []):
        detail = step.get("detail") or {}
        if step.get("step") == "stage" and isinstance(detail.get("stage"), dict):
            found.append(detail["stage"])
    return found


def _check(stage: dict[str, Any], name: str) -> dict[str, Any]:
    return next((c for c in stage.get("checks", []) if c["name"] == name), {})


def _nan(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")


def stage_figures(document: dict[str, Any], records: Requests | None) -> list[StageFigures]:
    out = []
    for stage in stages_of(document):
        percent = int(stage["stage"])
        p50 = p90 = float("nan")
        p99_check = _check(stage, "p99") or _check(stage, "p99_drift")
        p99 = _nan(_check(stage, "p99").get("value"))
        if math.isnan(p99) and p99_check.get("details", {}).get("candidate_p99") is not None:
            p99 = float(p99_check["details"]["candidate_p99"])
        interval = p99_check.get("interval") if p99_check.get("unit") == "s" else None
        if records is not None:
            subset = records.where(records.stage == percent)
            ok = subset.succeeded() & np.isfinite(subset.latency)
            if ok.any():
                p50, p90, p99 = (float(v) for v in np.quantile(subset.latency[ok], [0.5, 0.9, 0.99]))
        oom = _check(stage, "oom_kill_rate").get("details", {}).get("oom_kills")
        out.append(
            StageFigures(
                stage=percent,
                status=str(stage.get("status", "")),
                requests=int(stage.get("requests", 0)),
                p50=p50,
                p90=p90,
                p99=p99,
                p99_interval=(float(interval[0]), float(interval[1])) if interval and None not in interval else None,
                error_rate=_nan(_check(stage, "error_rate").get("value")),
                timeout_rate=_nan(_check(stage, "timeout_rate").get("value")),
                oom_kills=_nan(oom),
            )
        )
    return out


def load_records(records: Requests | pa.Table | str | Path | None) -> Requests | None:
    if records is None or isinstance(records, Requests):
        return records
    return load_requests(records)


def series_of(metrics: MetricsSnapshot | dict[str, Any] | None, name: str) -> tuple[list[float], list[float]] | None:
    """(seconds since the first point, values) of a snapshot series, or None when absent."""
    if metrics is None:
        return None
    snapshot = metrics if isinstance(metrics, MetricsSnapshot) else MetricsSnapshot.from_dict(metrics)
    series = snapshot.series.get(name)
    if series is None or not len(series.times):
        return None
    return [float(t - series.times[0]) for t in series.times], [float(v) for v in series.values]


KV_SERIES = KV_CACHE_USAGE
OOM_SERIES = OOM_KILLS
