"""Metric snapshots: counter increases with resets, JSON round trip, malformed files named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kfchaos.metrics.snapshot import MetricsSnapshot, Series, SnapshotError


def counter(values: list[float]) -> Series:
    return Series("oom_kills", np.arange(len(values), dtype=float) * 10, np.array(values, dtype=float), "counter")


def test_increase_counts_from_the_last_point_before_the_window() -> None:
    series = counter([0, 0, 1, 1, 3, 3])  # points at 0, 10, ..., 50
    assert series.increase(15, 50) == 3  # reference is the point at 10 (value 0)
    assert series.increase(20, 45) == 2  # reference at 20 (value 1): the kill before 20 is not counted again
    assert series.increase(20, 35) == 0  # the jump at 40 is after the window
    assert series.increase(60, 70) is None  # only one point (at 50) to go on: unknown, not zero


def test_increase_survives_a_counter_reset() -> None:
    # A restarted container starts its counter again: 2 -> 0 -> 1 is 1 more kill after the reset.
    assert counter([0, 2, 0, 1]).increase(0, 30) == 3


def test_increase_needs_two_points() -> None:
    assert counter([5]).increase(0, 100) is None


def test_round_trip_keeps_series_errors_and_unreachable(tmp_path: Path) -> None:
    snapshot = MetricsSnapshot("http://127.0.0.1:9", {"oom_kills": counter([0, 1])}, {"kv": "bad_data"}, None)
    snapshot.series["gpu"] = Series("gpu", np.array([1.0, 2.0]), np.array([np.nan, 3.0]))
    snapshot.write(tmp_path / "m.json")
    loaded = MetricsSnapshot.load(tmp_path / "m.json")
    assert loaded.errors == {"kv": "bad_data"} and loaded.series["oom_kills"].kind == "counter"
    assert np.isnan(loaded.series["gpu"].values[0]) and loaded.series["gpu"].values[1] == 3.0
    assert loaded.missing("kv") == "query for kv failed: bad_data"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "expected a JSON object"),
        ('{"series": {"x": {"points": [[1, "a"]]}}}', r"series\.x\.points: each point"),
        ('{"series": {"x": {"points": [], "kind": "histogram"}}}', r"series\.x\.kind"),
        ('{"serie": {}}', "unknown field"),
        ("{", r"m\.json:1: not valid JSON"),
    ],
)
def test_malformed_snapshots_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(SnapshotError, match=message):
        MetricsSnapshot.load(path)


def test_a_series_unsampled_for_more_than_a_few_scrapes_is_stale_there() -> None:
    times = 1.8e9 + np.arange(0, 601, 15.0)
    sampled = np.where(times <= 1.8e9 + 300, times, 1.8e9 + 300)  # the lookback repeats the sample of 300
    snapshot = MetricsSnapshot(grace=30.0)
    snapshot.series["c"] = Series("c", times, np.zeros(len(times)), "counter", sampled=sampled)
    assert snapshot.stale("c", 1.8e9, 1.8e9 + 300) is None
    why = snapshot.stale("c", 1.8e9, 1.8e9 + 600)
    assert why is not None and "(300s, more than 3 scrape intervals of 30s + the 15s step)" in why
    again = MetricsSnapshot.from_dict(snapshot.to_dict())  # the sample times travel with the snapshot
    assert again.stale("c", 1.8e9, 1.8e9 + 600) == why
    # Without sample times, the points themselves: a series whose points end early is stale after them.
    snapshot.series["g"] = Series("g", times[times <= 1.8e9 + 300], np.zeros(21))
    assert snapshot.stale("g", 1.8e9, 1.8e9 + 600) is not None
