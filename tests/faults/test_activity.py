"""Verified fault windows and stage coverage (kfchaos.faults.activity), and the per-request marking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kfchaos.faults.activity import (
    MAX_UNCOVERED_SHARE,
    FaultActivity,
    Poller,
    active_at,
    coverage,
    covered_seconds,
    run_fault_windows,
    verified_windows,
)
from kfchaos.steps.stagefaults import mark_fault_active, poll_interval
from tests.verdict.builders import concat, records


def test_windows_are_runs_of_active_observations_from_first_to_last() -> None:
    seen = [(0.0, True), (1.0, True), (2.0, False), (3.0, True), (4.0, True), (5.0, True)]
    assert verified_windows(seen) == [(0.0, 1.0), (3.0, 5.0)]
    # The time between the last active and the first inactive observation is unknown: not counted.
    assert verified_windows([(0.0, True), (1.0, False)]) == [(0.0, 0.0)]
    assert verified_windows([(2.0, True), (0.0, False), (1.0, True)]) == [(1.0, 2.0)]  # sorted by time
    assert verified_windows([]) == [] and verified_windows([(1.0, False)]) == []


def test_covered_seconds_clips_to_the_stage_and_does_not_count_overlaps_twice() -> None:
    assert covered_seconds([(0.0, 10.0)], 2.0, 8.0) == 6.0
    assert covered_seconds([(0.0, 5.0), (3.0, 7.0)], 0.0, 10.0) == 7.0
    assert covered_seconds([(11.0, 12.0)], 0.0, 10.0) == 0.0


def _activity(*seen: tuple[float, bool]) -> FaultActivity:
    return FaultActivity("delay", "delay-abc", "NetworkChaos", [30], 0.0, list(seen))


def test_a_fault_active_through_the_stage_covers_it() -> None:
    # Observed before the first request and after the last response: the whole stage is covered.
    seen = coverage(_activity((9.9, True), (15.0, True), (20.1, True)), (10.0, 20.0))
    assert seen.ok and seen.uncovered == 0.0 and seen.covered == 10.0


def test_a_fault_that_expires_mid_stage_leaves_the_rest_uncovered() -> None:
    seen = coverage(_activity((9.9, True), (14.0, True), (14.5, False), (20.1, False)), (10.0, 20.0))
    assert not seen.ok
    assert seen.uncovered == pytest.approx(6.0) and seen.share_uncovered == pytest.approx(0.6)


def test_nearly_all_is_the_documented_share() -> None:
    limit = 100 * MAX_UNCOVERED_SHARE  # seconds of a 100 s stage that may be unverified
    inside = coverage(_activity((0.0, True), (100 - limit, True), (100.0, False)), (0.0, 100.0))
    outside = coverage(_activity((0.0, True), (100 - 2 * limit, True), (100.0, False)), (0.0, 100.0))
    assert inside.ok and not outside.ok


def test_a_fault_never_seen_active_covers_nothing() -> None:
    seen = coverage(_activity((0.0, False), (10.0, False)), (0.0, 10.0))
    assert not seen.ok and seen.uncovered == 10.0


def test_the_json_shape_round_trips_its_windows() -> None:
    activity = _activity((0.0, True), (1.0, True), (2.0, False), (3.0, True))
    data = activity.to_dict()
    assert data["verified"] == [{"from": 0.0, "to": 1.0}, {"from": 3.0, "to": 3.0}]
    assert set(data) >= {"fault", "name", "kind", "stages", "applied_at", "verified", "removed_at"}
    assert FaultActivity.from_dict(data).verified == activity.verified


def test_a_failed_observation_counts_as_not_active() -> None:
    calls = iter([True, RuntimeError("connection refused"), True])
    ticks = iter(range(100))

    def observe(_: FaultActivity) -> bool:
        answer = next(calls)
        if isinstance(answer, Exception):
            raise answer
        return answer

    activity = _activity()
    poller = Poller([activity], observe, interval=3600, clock=lambda: float(next(ticks)))
    poller.poll_once()
    poller.poll_once()
    poller.poll_once()
    assert activity.verified == [(0.0, 0.0), (2.0, 2.0)]
    assert "connection refused" in activity.errors[0]


def test_the_poller_observes_before_and_after_what_it_wraps() -> None:
    ticks = iter(range(100))
    activity = _activity()
    with Poller([activity], lambda _: True, interval=3600, clock=lambda: float(next(ticks))):
        pass
    assert [t for t, _ in activity.observations] == [0.0, 1.0]


def test_active_at() -> None:
    times = np.array([0.5, 1.5, np.nan, 3.0])
    assert active_at([(0.0, 1.0), (3.0, 4.0)], times).tolist() == [True, False, False, True]


def test_poll_interval_resolves_the_stage_within_bounds() -> None:
    assert poll_interval(2.0) == 0.2 and poll_interval(60.0) == 1.2 and poll_interval(1200.0) == 2.0


def test_records_are_marked_from_the_verified_windows_not_from_the_plan(tmp_path: Path) -> None:
    # 100 requests over 1 s, sent 1 ms after intended; the fault was verified for the first half only.
    table = concat(
        records(30, np.full(100, 0.01), start=1000.0, fault_active=True),
        records(30, np.full(5, 0.01), start=1002.0, fault_active=False, long_context=True),
    )
    path = tmp_path / "records.parquet"
    pq.write_table(table, path)
    windows = [{"verified": [{"from": 999.0, "to": 1000.495}]}]
    assert mark_fault_active(path, windows) == 50 + 5  # bursts are the fault itself and stay marked
    marked = pq.read_table(path)
    assert marked.schema == table.schema
    assert marked.column("fault_active").to_pylist() == [True] * 50 + [False] * 50 + [True] * 5


def test_the_run_keeps_one_entry_per_fault_over_its_stages() -> None:
    first = _activity((0.0, True), (2.0, True)).to_dict()
    last = {**_activity((5.0, True), (7.0, True)).to_dict(), "applied_at": None, "removed_at": 7.5}
    steps = [
        {"step": "steady_state", "stage": 0, "detail": {}},
        {"step": "stage", "stage": 10, "detail": {"fault_windows": [first]}},
        {"step": "stage", "stage": 30, "detail": {"fault_windows": [last]}},
        {"step": "stage", "stage": 60, "detail": {"fault_windows": []}},
    ]
    (entry,) = run_fault_windows(steps)
    assert entry["applied_at"] == 0.0 and entry["removed_at"] == 7.5 and entry["watched_in"] == [10, 30]
    assert entry["verified"] == [{"from": 0.0, "to": 2.0, "stage": 10}, {"from": 5.0, "to": 7.0, "stage": 30}]


def test_a_fault_applied_in_each_stage_starts_at_its_first_apply_and_ends_at_its_last_removal() -> None:
    # A per-stage traffic fault (LoRA churn) is applied again when each stage begins: the later stage's apply
    # must not move the fault's start past the errors its first stage caused.
    first = {**_activity((0.0, True), (2.0, True)).to_dict(), "applied_at": 0.0, "removed_at": 2.5}
    second = {**_activity((5.0, True), (7.0, True)).to_dict(), "applied_at": 4.0, "removed_at": 7.5}
    steps = [{"step": "stage", "stage": s, "detail": {"fault_windows": [w]}} for s, w in ((10, first), (30, second))]
    (entry,) = run_fault_windows(steps)
    assert (entry["applied_at"], entry["removed_at"]) == (0.0, 7.5)
    (entry,) = run_fault_windows(list(reversed(steps)))  # whatever order the steps come in
    assert (entry["applied_at"], entry["removed_at"]) == (0.0, 7.5)
