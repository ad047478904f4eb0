"""Issue 37 point 4, its last part: load the run did not send. Real `kfchaos replay` of a stage of the verdict's
world (tests/verdict/world.py) while a stranger sends its own requests to the same demo server; the metrics taken
as the pipeline's metrics step takes them; the verdict's foreign_load check counts the stranger's requests from
the server's own counter, and reports them when they are beyond the target's normal traffic (its baseline)."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest

from kfchaos.baseline import Baseline, load_baseline
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.validate import load_experiment
from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.foreignload import MIN_FOREIGN, NAME
from kfchaos.verdict.model import Check, Status, Verdict
from tests.verdict.world import MODEL, STAGE_S, World, write_experiment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STRANGER_RATE = 10.0  # requests per second: beside the 50 % stage's 20, well inside the demo server's capacity


def _stranger(url: str, seconds: float, answered: list[int]) -> None:
    async def send() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

            async def one() -> None:
                body = {"model": MODEL, "prompt": "a stranger's prompt " * 10, "max_tokens": 6}
                async with session.post(f"{url}/v1/completions", json=body) as answer:
                    await answer.read()
                    answered.append(answer.status)

            tasks = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                tasks.append(asyncio.create_task(one()))
                await asyncio.sleep(1 / STRANGER_RATE)
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(send())


def _foreign(verdict: Verdict) -> Check:
    (stage,) = verdict.stages
    return next(c for c in stage.checks if c.name == NAME)


@pytest.fixture(scope="module")
def shared_stage(world: World) -> tuple[World, MetricsSnapshot, int]:
    """A 50 % stage replayed while the stranger sends for the stage's whole length; (world, metrics, stranger's
    answered requests)."""
    answered: list[int] = []
    stranger = threading.Thread(target=_stranger, args=(world.target, STAGE_S + 1, answered))
    stranger.start()
    records = world.replay(50, world.folder / "shared" / "stage-50.parquet")
    stranger.join()
    metrics = world.metrics(records, world.folder / "shared.metrics.json")
    return world, MetricsSnapshot.load(metrics), sum(1 for status in answered if status == 200)


def _judge(world: World, metrics: MetricsSnapshot, baseline: Baseline) -> Verdict:
    path = write_experiment(world.folder / "world-50-shared.yaml", world.stack, world.baseline, stages="[50]")
    records = world.folder / "shared" / "stage-50.parquet"
    return evaluate(records, load_experiment(path), baseline=baseline, metrics=metrics)


def test_a_well_behaved_run_counts_no_foreign_load(world: World) -> None:
    records = world.run_folder("alone", world.stages)
    code, verdict = world.verdict(records)
    assert code == 0, verdict["reasons"]
    for stage in verdict["stages"]:
        check = next(c for c in stage["checks"] if c["name"] == NAME)
        assert check["status"] == "PASS" and check["gating"] is False, check
        assert check["details"]["foreign"] <= MIN_FOREIGN, check
        assert check["details"]["server_finished"] > 0.9 * check["details"]["run_requests_bound"], check


def test_a_strangers_load_within_the_targets_normal_traffic_is_counted_not_flagged(
    shared_stage: tuple[World, MetricsSnapshot, int],
) -> None:
    world, metrics, stranger = shared_stage
    baseline, _ = load_baseline(world.baseline)
    check = _foreign(_judge(world, metrics, baseline))
    # The world's "production" ran at 40 req/s: a stranger at 10 is within the target's normal traffic.
    assert check.details["normal_rate"] is not None and check.details["normal_rate"] > STRANGER_RATE
    assert check.status is Status.PASS, check
    assert 0.6 * stranger <= check.details["foreign"] <= stranger + MIN_FOREIGN, (check.details, stranger)


def test_a_strangers_load_beyond_the_targets_normal_traffic_is_reported_and_changes_no_verdict(
    shared_stage: tuple[World, MetricsSnapshot, int],
) -> None:
    world, metrics, stranger = shared_stage
    baseline, _ = load_baseline(world.baseline)
    assert baseline.precision is not None
    # The same target, had its baseline seen it serve one request a second.
    quiet = baseline.model_copy(
        update={"precision": baseline.precision.model_copy(update={"requests_median": baseline.precision.step})}
    )
    with_normal, with_quiet = _judge(world, metrics, baseline), _judge(world, metrics, quiet)
    check = _foreign(with_quiet)
    assert check.status is Status.INCONCLUSIVE and not check.gating, check
    assert "from other clients" in check.reason and "beyond the target's normal traffic 1/s" in check.reason
    assert any(note.startswith(f"stage 50%: {NAME}:") for note in with_quiet.warnings), with_quiet.warnings
    assert with_quiet.status is with_normal.status
    assert stranger > 0.6 * STRANGER_RATE * STAGE_S  # the stranger was served
