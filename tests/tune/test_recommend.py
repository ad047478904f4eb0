"""The recommendation rule (kfchaos.tune.recommend) over configurations' outcomes: an OOM kill is never
recommended even in a run that PASSed, only a run that PASSed the whole ramp qualifies, the cheapest of those wins
(grid order breaks ties), and without one the answer is "none does" naming the closest."""

from __future__ import annotations

from kfchaos.tune.outcome import NOT_RUN, ConfigOutcome, StageOutcome
from kfchaos.tune.recommend import recommend
from kfchaos.tune.table import document, table

RAMP = (30, 60, 100)


def outcome(name: str, cost: float, statuses: tuple[str, ...], oom: int = 0, run: str | None = None) -> ConfigOutcome:
    stages = [StageOutcome(stage, status, 500, 0.99 if status == "PASS" else 0.7) for stage, status in
              zip(RAMP, statuses, strict=True)]  # fmt: skip
    overall = run or ("PASS" if all(s == "PASS" for s in statuses) else "FAIL")
    return ConfigOutcome(name, f"--flags-of {name}", cost, overall, stages, oom, f"runs/{name}")


def test_the_breakpoint_is_the_last_stage_of_the_unbroken_passes_from_the_first() -> None:
    assert outcome("a", 1, ("PASS", "PASS", "PASS")).breakpoint == 100
    assert outcome("b", 1, ("PASS", "FAIL", NOT_RUN)).breakpoint == 30
    assert outcome("c", 1, ("PASS", "INCONCLUSIVE", "PASS")).breakpoint == 30  # a later PASS after a gap is not held
    assert outcome("d", 1, ("FAIL", NOT_RUN, NOT_RUN)).breakpoint is None


def test_an_oom_kill_is_never_recommended_even_when_its_run_passed_and_it_is_cheapest() -> None:
    cheap_oom = outcome("cheap", 1, ("PASS", "PASS", "PASS"), oom=1)
    dear = outcome("dear", 5, ("PASS", "PASS", "PASS"))
    chosen = recommend([cheap_oom, dear], "cost")
    assert chosen.chosen is dear
    assert (
        "cheap: PASS" in chosen.evidence[0] and "not eligible: 1 OOM kill(s): never recommended" in chosen.evidence[0]
    )
    assert (
        chosen.evidence[-1] == "dear is the cheapest of the 1 eligible (cheapest: cost); the cheaper cheap did not hold"
    )


def test_the_cheapest_that_passes_the_whole_ramp_wins_and_grid_order_breaks_ties() -> None:
    runs = [
        outcome("held-60", 0.5, ("PASS", "PASS", "FAIL")),  # cheapest, but did not hold 100 %
        outcome("first", 2, ("PASS", "PASS", "PASS")),
        outcome("second", 2, ("PASS", "PASS", "PASS")),
        outcome("dear", 3, ("PASS", "PASS", "PASS")),
        outcome("stages-only", 1, ("PASS", "PASS", "PASS"), run="FAIL"),  # every stage PASSed, recovery FAILed
    ]
    chosen = recommend(runs, "cost")
    assert chosen.chosen is runs[1]
    assert chosen.to_dict()["recommended"] == "first" and chosen.to_dict()["closest"] is None
    assert "held-60: FAIL" in chosen.evidence[0] and "not eligible: run FAIL, held up to 60 %" in chosen.evidence[0]
    assert "not eligible: run FAIL, held up to 100 %" in chosen.evidence[4]


def test_none_does_names_the_closest_preferring_no_oom_then_the_highest_breakpoint() -> None:
    runs = [
        outcome("oom-far", 1, ("PASS", "PASS", "FAIL"), oom=2),
        outcome("near", 3, ("PASS", "PASS", "FAIL")),
        outcome("short", 2, ("PASS", "FAIL", NOT_RUN)),
    ]
    chosen = recommend(runs, "cost")
    assert chosen.chosen is None and chosen.closest is runs[1]
    assert chosen.headline() == "none of the configurations PASSes the whole ramp; closest: near (not recommended)"
    text = table(runs, chosen)
    assert "*" not in text.split("\n\n")[0]  # nothing is marked as the recommendation
    assert document("e.yaml", "g.yaml", runs, chosen)["recommendation"] == {
        "recommended": None,
        "closest": "near",
        "cheapest_means": "cost",
        "headline": chosen.headline(),
        "evidence": chosen.evidence,
    }
