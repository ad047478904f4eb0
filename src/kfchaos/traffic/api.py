"""The public API of the replay engine (kept stable; the KFP pipeline steps call it).

    plan = plan_stage("experiments/x.yaml", 60, shard=0, shards=4)   # -> ReplayPlan, plan.hash
    result = run_stage(plan, "http://vllm:8000", out="records.parquet") # -> StageResult (.summary, .table)
    summary = merge_shards(["s0.parquet", "s1.parquet"], plan.settings)  # one stage from its shards

`async replay(plan, target, ...)` is the same as run_stage inside a running event loop.
"""

from __future__ import annotations

from pathlib import Path

from kfchaos.traffic.engine import StageResult, replay, run_stage
from kfchaos.traffic.plan import ReplayPlan, plan_stage, settings_from_experiment
from kfchaos.traffic.recorder import read_records
from kfchaos.traffic.settings import ReplaySettings
from kfchaos.traffic.summary import StageSummary, summarize

__all__ = [
    "ReplayPlan",
    "ReplaySettings",
    "StageResult",
    "StageSummary",
    "merge_shards",
    "plan_stage",
    "replay",
    "run_stage",
    "settings_from_experiment",
]


def merge_shards(paths: list[str | Path], settings: ReplaySettings) -> StageSummary:
    """The summary of one stage from the Parquet records of its shards (any shard's settings will do)."""
    table = read_records(paths)
    return summarize(
        table,
        stage=settings.stage,
        duration=settings.duration,
        max_send_lag_p99=settings.max_send_lag_p99,
        goodput=settings.goodput,
        streaming=settings.api != "http",
    )
