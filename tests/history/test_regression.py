"""The regression test's rules on their own: which side of a limit is worse, the smallest p-value a number of runs
can give, the failure modes' grouping."""

from __future__ import annotations

import pytest

from kfchaos.history.model import Measurement, RunEntry
from kfchaos.history.regression import (
    NOT_ENOUGH,
    REGRESSION,
    compare,
    failure_modes,
    runs_needed,
    smallest_p,
    worse_side,
)


def _m(
    status: str, value: float | None, threshold: float | None, check: str = "p99", stage: int = 60, reason: str = ""
) -> Measurement:
    return Measurement(check, stage, status, value, threshold, "s", reason)


def test_the_worse_side_is_read_from_the_runs_verdicts() -> None:
    assert worse_side([_m("PASS", 0.3, 1.0), _m("FAIL", 1.4, 1.0)]) == "higher"  # an upper limit (P99)
    assert worse_side([_m("PASS", 0.99, 0.9), _m("FAIL", 0.5, 0.9)]) == "lower"  # a lower limit (load delivered)
    assert worse_side([_m("INCONCLUSIVE", 0.3, 1.0)]) is None  # no run says
    assert worse_side([_m("PASS", 0.3, 1.0), _m("PASS", 1.3, 1.0)]) is None  # the runs disagree: not guessed


def test_smallest_p_and_runs_needed() -> None:
    assert smallest_p(3, 3) == pytest.approx(1 / 20)  # 3 against 3 can never reach 98 %
    assert runs_needed(0.02) == 4  # 1/C(8,4) = 1/70
    assert runs_needed(0.02 / 30) == 7  # thirty comparisons: 1/C(14,7) = 1/3432


def _run(i: int, version: str, p99: float, status: str = "PASS", verified: bool = True) -> RunEntry:
    return RunEntry(
        f"r{i}",
        "test",
        float(i),
        version,
        "pipeline",
        status,
        verified,
        [] if verified else ["seal"],
        [_m(status, p99, 1.0)],
    )


def test_one_check_alone_needs_four_runs_a_side() -> None:
    three = [_run(i, "1", 0.3 + i / 100) for i in range(3)] + [_run(10 + i, "2", 0.6 + i / 100) for i in range(3)]
    assert compare(three, "1", "2").comparisons[0].outcome == NOT_ENOUGH
    four = [_run(i, "1", 0.3 + i / 100) for i in range(4)] + [_run(10 + i, "2", 0.6 + i / 100) for i in range(4)]
    found = compare(four, "1", "2").comparisons[0]
    assert found.outcome == REGRESSION and found.p_value == pytest.approx(1 / 70)


def test_unverified_runs_are_not_counted() -> None:
    runs = [_run(i, "1", 0.3) for i in range(4)] + [_run(10 + i, "2", 0.9, verified=i > 0) for i in range(4)]
    assert compare(runs, "1", "2").comparisons[0].new_runs == 3


def test_failure_modes_group_reasons_that_differ_only_in_figures() -> None:
    runs = [
        RunEntry(
            f"r{i}",
            "t",
            float(i),
            "1",
            "pipeline",
            "FAIL",
            True,
            [],
            [_m("FAIL", 1.2 + i, 1.0, reason=f"{i + 3}/600 requests above 1s, 0.{i}..2% vs 1%")],
        )
        for i in range(3)
    ]
    runs.append(RunEntry("r9", "t", 9.0, "1", "pipeline", "FAIL", False, ["seal"], [_m("FAIL", 3, 1.0)]))
    (mode,) = failure_modes(runs)
    assert (mode.runs, mode.reason) == (3, "#/# requests above #s, #..# vs #")
