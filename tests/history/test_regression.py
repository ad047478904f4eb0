"""The regression test's rules on their own: which side of a limit is worse, the smallest p-value a number of runs
can give, the failure modes' grouping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kfchaos.history import render, summary
from kfchaos.history.model import Measurement, RunEntry
from kfchaos.history.regression import (
    NO_REGRESSION,
    NOT_ENOUGH,
    NOT_TESTED,
    RANK,
    REGRESSION,
    WELCH,
    PValue,
    compare,
    failure_modes,
    p_value_of,
    rank_exact,
    runs_needed,
    smallest_p,
    tarone_holm,
    tarone_k,
    worse_side,
)
from kfchaos.history.render import stage_name


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


def test_one_check_alone() -> None:
    """Welch's t on the logs has no floor: three tight runs a side of a doubled P99 are a regression. The exact
    rank test, which a check gets where the log does not apply (a value of 0), needs four a side to reach 98 %."""
    three = [_run(i, "1", 0.3 + i / 100) for i in range(3)] + [_run(10 + i, "2", 0.6 + i / 100) for i in range(3)]
    found = compare(three, "1", "2").comparisons[0]
    assert (found.outcome, found.method) == (REGRESSION, WELCH)
    three = [_run(i, "1", 0.0) for i in range(3)] + [_run(10 + i, "2", 0.6 + i / 100) for i in range(3)]
    found = compare(three, "1", "2").comparisons[0]
    assert (found.outcome, found.method) == (NOT_ENOUGH, RANK)
    assert "4 a side needed for the exact rank test" in found.why
    four = [_run(i, "1", 0.0) for i in range(4)] + [_run(10 + i, "2", 0.6 + i / 100) for i in range(4)]
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


# --- issue 47: a test with power at 3-4 runs a side, Tarone-Holm, "needed" that means enough, what moved first ----

STAGES = (25, 50, 75, 100)
# (check, unit, worse side, typical value): the 18 comparisons of a four-stage experiment, as
# scripts/history_power.py simulates them.
LATENCY = (("p99", "s", 1.2), ("p99_drift", "ratio", 0.05), ("ttft_p99", "s", 0.3))


def _history(
    per_side: int,
    moved: dict[tuple[str, int], float] | None = None,
    seed: int = 47,
    spread: float = 0.03,
    new_runs: int | None = None,
) -> list[RunEntry]:
    """OLD ("1") and NEW ("2") runs of a four-stage experiment: p99, p99_drift and ttft_p99 at every stage (log-normal
    per run, `spread` on the log scale), error_rate and timeout_rate at 75 and 100 % (mostly 0: the rank test's
    case), load and replay at 100 %.
    `moved`: (check, stage) -> the factor NEW's values are multiplied by (for a drift: 1 + value)."""
    rng = np.random.default_rng(seed)
    moved = moved or {}
    runs = []
    for side, version, count in (("old", "1", per_side), ("new", "2", new_runs or per_side)):
        for i in range(count):
            night = rng.normal(0.0, spread / 2)
            checks = []
            for stage in STAGES:
                for check, unit, typical in LATENCY:
                    factor = moved.get((check, stage), 1.0) if side == "new" else 1.0
                    noise = math.exp(night + rng.normal(0.0, spread))
                    value = (1 + typical) * noise * factor - 1 if unit == "ratio" else typical * noise * factor
                    limit = 1.0 if unit == "ratio" else 4 * typical
                    checks.append(Measurement(check, stage, "PASS", value, limit, unit, ""))
            for stage in (75, 100):
                for check, rate in (("error_rate", 0.002), ("timeout_rate", 0.001)):
                    factor = moved.get((check, stage), 1.0) if side == "new" else 1.0
                    share = float(rng.binomial(600, rate * factor)) / 600
                    checks.append(Measurement(check, stage, "PASS", share, 0.05, "fraction", ""))
            load = 1.0 - abs(rng.normal(0.0, 0.001))
            checks.append(Measurement("load", 100, "PASS", load, 0.9, "fraction", ""))
            checks.append(Measurement("replay", 100, "PASS", 1.0, 0.9, "fraction", ""))  # the same every run
            index = len(runs)
            runs.append(RunEntry(f"{side}{i}", "t", float(index), version, "pipeline", "PASS", True, [], checks))
    return runs


def test_the_family_is_eighteen_comparisons() -> None:
    assert len(compare(_history(4), "1", "2").comparisons) == 18


def test_tarone_k_leaves_out_what_cannot_reach_the_level() -> None:
    assert tarone_k([0.0] * 5, 0.02) == 5  # Welch's t has no floor: every comparison counts
    assert tarone_k([0.0] * 3 + [1 / 70] * 15, 0.02) == 3  # 4 a side rank tests cannot reach 0.02 / 2
    assert tarone_k([1 / 70] * 18, 0.02) == 2  # ... so with nothing else, nothing at all is testable
    assert tarone_k([1 / 924] * 18, 0.02) == 18  # 6 a side: 1/924 <= 0.02/18
    tests = [PValue(1e-5, WELCH, 0.0), PValue(0.03, WELCH, 0.0), PValue(1 / 70, RANK, 1 / 70)]
    decisions = tarone_holm(tests, 0.02)
    assert [d.rejected for d in decisions] == [True, False, False]
    assert decisions[0].alpha == pytest.approx(0.01) and decisions[1].alpha == pytest.approx(0.01)
    assert not decisions[2].reachable  # 1/70 > 0.02 / 2 at every step: left out, never held to a level
    # once the others are rejected, the rank test alone is held to the whole 2 %, which 1/70 reaches
    tests[1] = PValue(0.004, WELCH, 0.0)
    assert [d.rejected for d in tarone_holm(tests, 0.02)] == [True, True, True]


def test_holm_over_everything_could_not_tell_tarone_holm_can() -> None:
    """Four runs a side of a clear +20 % on one check among 17 flat ones: a regression, that check alone. The old
    Mann-Whitney + Holm over all 18 called every comparison "not enough runs" (1/70 > 0.02/18)."""
    found = compare(_history(4, {("p99", 100): 1.2}), "1", "2")
    assert [(c.check, c.stage) for c in found.regressions] == [("p99", 100)]
    claimed = found.regressions[0]
    assert claimed.method == WELCH and claimed.p_value is not None and claimed.alpha is not None
    assert claimed.p_value <= claimed.alpha
    assert claimed.change == pytest.approx(0.2, abs=0.08)
    assert found.comparisons[0] is claimed  # what moved first
    # the same distribution on both sides: nothing claimed, and the flat checks decided, not "not enough"
    same = compare(_history(4), "1", "2")
    assert not same.regressions
    assert {c.outcome for c in same.comparisons if c.method == WELCH} == {NO_REGRESSION}


def test_same_version_is_claimed_as_nothing_across_seeds() -> None:
    """500 A/A histories of 18 comparisons at 4 a side: at most 2 % with any claim (2000 of them give 1.3 %)."""
    claims = sum(bool(compare(_history(4, seed=s), "1", "2").regressions) for s in range(500))
    assert claims <= 10


def test_the_demo_bump_is_claimed_at_four_runs_a_side() -> None:
    """Issue 47's demo, 200 ms -> 800 ms network delay: p99_drift's median from +5.0 % to +20.9 % (a P99 1.15 times
    the old), ttft_p99 from 1.19 s to 1.78 s (1.5 times), four runs a side. The issue gives the medians, not each
    run's value: the runs here spread as the simulation's steady target does (3 % on the log scale), since
    eight demo runs (about a minute each) are too slow for a unit test."""
    moved = {("p99_drift", s): 1.209 / 1.05 for s in (75, 100)}
    moved |= {("p99", s): 1.209 / 1.05 for s in (75, 100)}
    moved |= {("ttft_p99", s): 1.78 / 1.19 for s in (75, 100)}
    found = compare(_history(4, moved, seed=7), "1", "2")
    regressed = {(c.check, c.stage) for c in found.regressions}
    assert {("p99_drift", 75), ("p99_drift", 100)} <= regressed
    assert regressed <= set(moved)  # nothing that did not move
    assert not compare(_history(4, seed=8), "1", "2").regressions  # four a side of the same version


def test_runs_needed_is_enough_and_does_not_move() -> None:
    """The count a "not enough runs" prints is for the family that will be compared, so it is the same at 2 runs
    a side as at 4; and with that many runs a side every comparison is decided, regression or not."""
    whys: dict[int, set[str]] = {}
    for per_side in (2, 3, 4):
        found = compare(_history(per_side, {("error_rate", 100): 1.0}), "1", "2")
        short = [c for c in found.comparisons if c.outcome == NOT_ENOUGH]
        rank_short = [c for c in short if c.method == RANK]
        whys[per_side] = {c.why.split("; ", 1)[1] for c in rank_short}
        if per_side == 2:  # below MIN_RUNS: every comparison short, Welch's needing 3
            assert len(short) == 18
            assert any("3 a side needed for Welch's t-test to decide" in c.why for c in short)
    assert (
        whys[2]
        == whys[3]
        == whys[4]
        == {"6 a side needed for the exact rank test to decide at 98% confidence over the 18 comparisons"}
    )
    assert runs_needed(0.02 / 18) == 6
    decided = compare(_history(6), "1", "2")
    assert all(c.outcome in (REGRESSION, NO_REGRESSION) for c in decided.comparisons)


def test_the_rank_test_is_exact_with_ties() -> None:
    assert rank_exact([0.0] * 4, [0.1] * 4, "higher") == pytest.approx(1 / 70)  # the floor, ties and all
    assert rank_exact([0.0] * 4, [0.0] * 4, "higher") == 1.0
    assert rank_exact([0.0, 0.0, 0.1, 0.0], [0.0, 0.1, 0.1, 0.0], "higher") > 0.2
    # the log is read only where every value is above 0 (a drift: above -100 %), else the rank test
    assert p_value_of([0.0, 0.01, 0.0], [0.02, 0.03, 0.01], "higher", "fraction").method == RANK
    assert p_value_of([-0.1, 0.05, 0.0], [0.2, 0.3, 0.25], "higher", "ratio").method == WELCH
    assert p_value_of([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], "lower", "fraction").method == RANK  # no spread


def test_what_moved_comes_first() -> None:
    runs = _history(4, {("ttft_p99", 50): 1.12, ("p99", 25): 0.95}, spread=0.2)  # too noisy to claim anything
    found = compare(runs, "1", "2")
    assert not found.regressions
    moved = [c.moved for c in found.comparisons if c.outcome != NOT_TESTED]
    assert moved == sorted(moved, reverse=True)
    history = summary.build("t", "tests", runs)
    row_moves = {(c.check, c.stage): c.moved for c in found.comparisons}
    rows = [row_moves[(r.check, r.stage)] for r in history.rows]
    assert rows == sorted(rows, reverse=True)
    text = render.text(history)
    listed = [line for line in text.splitlines() if line.startswith(("  NO REGRESSION", "  NOT ENOUGH RUNS"))]
    first = found.comparisons[0]
    assert f" {first.check} at {stage_name(first.stage)}: " in listed[0]
    first = next(c for c in found.comparisons if c.outcome == NO_REGRESSION)
    page = render.html(history)
    table = page[page.index("&rarr;") :]  # the comparison's table: the most moved check's row first
    last = [c for c in found.comparisons if c.outcome != NOT_TESTED][-1]
    top = found.comparisons[0]
    assert table.index(f"<td>{top.check}</td><td>{stage_name(top.stage)}</td>") < table.index(
        f"<td>{last.check}</td><td>{stage_name(last.stage)}</td>"
    )
    checks = page[page.index("Checks across runs") : page.index("&rarr;")]
    assert checks.index(f"<td>{top.check}</td><td>{stage_name(top.stage)}</td>") < checks.index(
        f"<td>{last.check}</td><td>{stage_name(last.stage)}</td>"
    )
    markdown = render.markdown_compare(history)
    assert f"compared without a regression, the most moved first: `{first.check}` at {stage_name(first.stage)}" in (
        markdown
    )
