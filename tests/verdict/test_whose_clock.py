"""Issue 31 class 6: the metrics must be read on the run's own time. Real `kfchaos replay` of a stage by a replayer
whose clock is 30 s behind Prometheus's, against the demo server of the verdict's world (tests/verdict/world.py);
the metrics collected over the records' window by kfchaos.metrics.collect, once on a machine whose clock is right
(the skew does not show, the server's own counter does) and once on the replayer's (the skew shows); judged by
`kfchaos verdict`. Before, both PASSed: Prometheus held a quiet stretch where the records said the stage ran, and
an OOM kill during the real stage would have been outside every window read."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.verdict.world import World, write_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BEHIND = -30.0


def _window_check(verdict: dict[str, Any]) -> dict[str, Any]:
    (stage,) = verdict["stages"]
    return next(c for c in stage["checks"] if c["name"] == "metrics_window")


@pytest.fixture(scope="module")
def skewed(world: World) -> tuple[World, Any, Any]:
    # The server idles first: what Prometheus holds of the half minute before the replay is quiet, as it would be
    # before a stage on a target with no other traffic.
    time.sleep(35)
    records = world.replay(50, world.folder / "skewed" / "stage-50.parquet", clock_offset=BEHIND)
    experiment = write_experiment(world.folder / "world-50.yaml", world.stack, world.baseline, stages="[50]")
    return world, records.parent, experiment


def test_metrics_of_the_records_window_without_the_runs_requests_are_inconclusive(skewed: tuple[Any, ...]) -> None:
    world, records, experiment = skewed
    metrics = world.metrics(records, world.folder / "skewed-right-clock.json")
    out = world.folder / "skewed-report"
    code, verdict = world.verdict(records, metrics=metrics, experiment=experiment, out=out)
    check = _window_check(verdict)
    assert check["status"] == "INCONCLUSIVE", check
    assert "the metrics window does not hold the run's requests" in check["reason"]
    assert check["details"]["server_finished"] < 0.5 * check["details"]["completions"]
    assert abs(check["details"]["clock_skew_s"]) < 1.0  # the collector's clock was right: only the counter shows it
    assert (code, verdict["status"]) == (2, "INCONCLUSIVE"), verdict["reasons"]
    report = (out / "report.md").read_text()  # Markdown: its underscores escaped (kfchaos.report.mdtext)
    assert "metrics\\_window: Prometheus's vllm:e2e\\_request\\_latency\\_seconds\\_count" in report


def test_a_skewed_clock_is_measured_and_inconclusive(skewed: tuple[Any, ...]) -> None:
    world, records, experiment = skewed
    metrics = world.metrics(records, world.folder / "skewed-own-clock.json", clock_offset=BEHIND)
    code, verdict = world.verdict(records, metrics=metrics, experiment=experiment)
    check = _window_check(verdict)
    assert check["status"] == "INCONCLUSIVE", check
    assert check["details"]["clock_skew_s"] == pytest.approx(-BEHIND, abs=1.0)
    assert (
        "Prometheus's clock is +30" in check["reason"]
        and "every window read from Prometheus is off" in (check["reason"])
    )
    assert (code, verdict["status"]) == (2, "INCONCLUSIVE"), verdict["reasons"]
