"""Restart attribution and per-series differencing in kfchaos.metrics.oom, on hand-made series."""

from __future__ import annotations

import numpy as np

from kfchaos.metrics.counters import increments
from kfchaos.metrics.oom import _on_grid, cadvisor_events, cumulative, restarts, unseen
from kfchaos.metrics.source import RangeSeries

T0 = 1.8e9  # epoch seconds: large enough that a relative tolerance would merge distinct points
POD = {"namespace": "serving", "pod": "vllm-0", "container": "vllm", "uid": "u"}


def series(times: list[float], values: list[float], **labels: str) -> RangeSeries:
    return RangeSeries({**POD, **labels}, T0 + np.array(times), np.array(values, dtype=float))


def test_each_restart_takes_the_reason_shown_with_it() -> None:
    counts = series([0, 15, 30, 45], [0, 1, 1, 2])
    reasons = [series([15, 30], [1, 1], reason="OOMKilled"), series([45], [1], reason="Error")]
    found = restarts([counts], reasons, since=T0)
    assert [(r.time - T0, r.reason) for r in found] == [(15, "OOMKilled"), (45, "Error")]


def test_several_restarts_between_points_leave_all_but_the_last_without_a_reason() -> None:
    found = restarts([series([0, 15], [0, 3])], [series([15], [1], reason="OOMKilled")], since=T0)
    assert [(r.count, r.reason) for r in found] == [(1.0, "OOMKilled"), (2.0, None)]


def test_a_new_pod_is_counted_from_zero_an_old_one_from_its_first_point() -> None:
    late = series([30, 45], [1, 1])  # created inside the range: a new pod whose container restarted once
    reason = [series([30, 45], [1, 1], reason="OOMKilled")]
    assert [r.reason for r in restarts([late], reason, since=T0, created={"u": T0 + 20})] == ["OOMKilled"]
    early = series([0, 15], [4, 4])  # there from the range's start: its 4 restarts are history
    assert restarts([early], reason, since=T0) == []


def test_a_series_first_seen_late_with_no_creation_time_sets_its_level_and_is_unseen_before() -> None:
    """Absence proves nothing: without kube_pod_created the late series may be an old pod back after a scrape gap,
    whose restart count is its lifetime's. Its first sample is its level, not 5 kills; the span before it is
    unknown, so the count cannot PASS either (kfchaos.metrics.counters)."""
    late = series([30, 45], [5, 5])
    reason = [series([30, 45], [1, 1], reason="OOMKilled")]
    assert restarts([late], reason, since=T0) == []
    assert unseen([late], T0, {}) == [(T0, T0 + 30)]
    assert unseen([late], T0, {"u": T0 + 20}) == []  # created inside: new, seen from its birth
    no_uid = RangeSeries({k: v for k, v in POD.items() if k != "uid"}, T0 + np.array([30.0, 45.0]), np.ones(2))
    assert [r.count for r in restarts([no_uid], [], since=T0, created={"serving/vllm-0": T0 + 20})] == [1.0]


def test_counters_are_differenced_per_series_never_summed_first() -> None:
    gone = series([0, 15, 30], [3, 3, 3], id="/a")  # this pod disappears after 30 s
    stays = series([0, 15, 30, 45, 60], [3, 3, 3, 3, 3], id="/b")
    assert cadvisor_events([gone, stays], since=T0) == []  # [6, 6, 6, 3, 3] summed would be 3 phantom kills
    assert increments(np.array([2.0, 3.0, 1.0])).tolist() == [0.0, 1.0, 1.0]  # a reset: the new value counts


def test_replicas_of_one_container_are_joined_and_a_lagging_copy_is_no_reset() -> None:
    a = series([0, 15, 30, 45], [2, 3, 3, 3], instance="ksm-a")
    b = series([0, 15, 30, 45], [2, 2, 3, 3], instance="ksm-b")  # a scrape behind
    reasons = [series([15, 30, 45], [1, 1, 1], reason="OOMKilled", instance="ksm-a")]
    found = restarts([a, b], reasons, since=T0)
    assert [(r.time - T0, r.count, r.reason) for r in found] == [(15, 1.0, "OOMKilled")]


def test_a_kill_seen_down_is_counted_once_when_seen_and_not_again_at_its_restart() -> None:
    counts = series([0, 15, 30, 45, 60], [1, 1, 1, 1, 2])
    reasons = [series([0, 15, 30, 45, 60], [1, 1, 1, 1, 1], reason="OOMKilled")]
    # timestamp() of the waiting series: fresh at 30 and 45, then repeated by the lookback at 60.
    waiting = series([30, 45, 60], [T0 + 30, T0 + 45, T0 + 45], reason="CrashLoopBackOff")
    found = restarts([counts], reasons, since=T0, down_series=[waiting])
    assert [(r.time - T0, r.reason) for r in found] == [(30, "OOMKilled")]


def test_a_pod_created_before_the_range_is_old_even_when_its_series_shows_late() -> None:
    late = series([30, 45], [5, 5])
    reason = [series([30, 45], [1, 1], reason="OOMKilled")]
    assert restarts([late], reason, since=T0, created={"u": T0 - 86400}) == []
    assert unseen([late], T0, {"u": T0 - 86400}) == [(T0, T0 + 30)]
    assert [r.count for r in restarts([late], reason, since=T0, created={"u": T0 + 20})] == [1.0, 4.0]


def test_sample_times_land_on_the_grid_whatever_the_step_fraction() -> None:
    grid = T0 + 0.123456 + np.arange(80) * 1.2345678  # a long run's step: (end - start) / 10 000
    answered = np.round(grid * 1000) / 1000 + np.arange(80) * 3e-5  # whole milliseconds, drifting
    placed = _on_grid(grid, [RangeSeries({}, answered, answered)])
    assert np.isfinite(placed).all() and np.allclose(placed, answered)


def test_one_cgroup_scraped_by_two_jobs_counts_its_oom_events_once() -> None:
    first = series([0, 15, 30], [0, 1, 1], id="/kubepods/c1", job="kubelet", instance="node-a")
    second = series([0, 15, 30], [0, 0, 1], id="/kubepods/c1", job="cadvisor", instance="node-a:4194")
    assert cadvisor_events([first, second], since=T0) == [(T0 + 15, 1.0)]


def test_a_cgroup_first_seen_late_counts_from_zero_only_when_its_start_time_says_it_is_new() -> None:
    """A pod-level cgroup's OOM count holds the pod's whole life: seen again after a gap it is its level. Only
    container_start_time_seconds inside the range makes it a new cgroup, counted from 0."""
    late = series([30, 45], [1, 1], id="/kubepods/pod-u")
    assert cadvisor_events([late], since=T0) == []
    key = ("serving", "vllm-0", "vllm", "/kubepods/pod-u")
    assert cadvisor_events([late], since=T0, started={key: T0 - 86400}) == []
    assert cadvisor_events([late], since=T0, started={key: T0 + 20}) == [(T0 + 30, 1.0)]


def test_an_event_at_prometheus_millisecond_time_counts_on_its_own_grid_point() -> None:
    """Prometheus rounds a range query's start to whole milliseconds (prometheus/prometheus web/api/v1/api.go
    parseTime: `math.Round(ns*1000) / 1000`), so its points can lie up to half a millisecond after the grid's.
    A restart seen at such a point belongs to that grid point, not the next one: the next one can be past the
    window's end plus its grace, and the kill would be missed (found on the real cluster, test_oom_real.py)."""
    start, step = T0 + 0.8928668, 5.0
    grid = np.arange(start, start + 30 + step / 2, step)
    prometheus_point = round(grid[3], 3)  # what Prometheus returns for grid[3]: 0.13 ms later
    assert prometheus_point > grid[3]
    counted = cumulative("oom_kills", grid, [(prometheus_point, 1.0)], "q")
    assert counted.values.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert counted.increase(start, grid[3] + 0.001) == 1  # a window ending just after that point sees it
