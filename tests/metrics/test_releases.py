"""Detected releases span the whole rollout, read with kubectl's rolled-out rule from kube-state-metrics."""

from __future__ import annotations

import numpy as np

from kfchaos.metrics.releases import PARTS, detect
from kfchaos.metrics.source import RangeSeries, Sample

STEP = 60.0
TIMES = np.arange(0.0, 6 * 3600.0, STEP)


class Source:
    """Range answers from fixed per-deployment series, keyed by the metric name in the query."""

    url = "memory://"

    def __init__(self, series: dict[str, np.ndarray]) -> None:
        self.series = series

    def instant(self, query: str, at: float | None = None) -> list[Sample]:
        return []

    def range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        metric = next((m for m in self.series if f"({m}{{" in query), None)
        if metric is None:
            return []
        return [RangeSeries({"deployment": "vllm"}, TIMES, self.series[metric])]


def rollout(start: float, done: float | None) -> dict[str, np.ndarray]:
    """Two replicas; the generation changes at `start`; both new replicas available (old gone) at `done`."""
    rolling = (start <= TIMES) & ((done > TIMES) if done is not None else True)
    return {
        PARTS["observed"]: np.where(start <= TIMES, 2.0, 1.0),
        PARTS["generation"]: np.where(start <= TIMES, 2.0, 1.0),
        PARTS["spec"]: np.full(len(TIMES), 2.0),
        PARTS["updated"]: np.where(rolling, np.where(start + 1800 <= TIMES, 1.0, 0.0), 2.0),
        PARTS["replicas"]: np.where(rolling, 3.0, 2.0),
        PARTS["available"]: np.full(len(TIMES), 2.0),
    }


def test_a_two_hour_rollout_is_one_release_from_start_to_completion() -> None:
    (release,), notes, sent = detect(Source(rollout(3600.0, 3600.0 + 7200.0)), "serving", 0.0, TIMES[-1], STEP)
    assert release.start == 3600.0 - STEP and release.end == 3600.0 + 7200.0
    assert "complete at" in release.reason
    # This source has only the Deployment series: the image and ReplicaSet signals are said to be missing.
    assert [n for n in notes if "cannot be detected" not in n] == []
    assert {f"rollout.{p}" for p in PARTS} <= set(sent)


def test_a_rollout_never_seen_completing_runs_to_the_window_end() -> None:
    (release,), _, _ = detect(Source(rollout(3600.0, None)), "serving", 0.0, TIMES[-1], STEP)
    assert release.end == TIMES[-1] and "not seen completing" in release.reason


def test_without_completion_series_only_the_change_is_known_and_said() -> None:
    series = {k: v for k, v in rollout(3600.0, 7200.0).items() if k == PARTS["observed"]}
    (release,), notes, _ = detect(Source(series), "serving", 0.0, TIMES[-1], STEP)
    assert release.end == 3600.0
    (note,) = [n for n in notes if "cannot be detected" not in n]  # not the missing image/ReplicaSet signals
    assert "rollout completion unknown" in note and "kube_deployment_status_replicas_updated" in note
