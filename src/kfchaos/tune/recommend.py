"""The recommendation: the cheapest configuration whose whole run PASSed under the faults, with its evidence.

The rule, in order:
1. A configuration that had any OOM kill is never recommended, whatever its verdict (an OOM kill is the incident
   this tool exists to prevent; a run that PASSed with one rests on the rate limit, not on its absence).
2. Of the rest, only one whose run PASSed, every stage of the ramp included up to the top one (100 % where the
   ramp reaches it) and the experiment-wide checks (recovery, fault verification), can be recommended.
3. Of those, the cheapest (kfchaos.tune.grid: the grid's `cost`, else the GPU memory reserved); ties go to the one
   listed first in the grid.
When none qualifies, the answer is "none does", with the closest: no OOM kill first, then the highest breakpoint,
then the most goodput at it, then the cheapest. It is named as the closest, never as a recommendation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kfchaos.tune.outcome import ConfigOutcome


@dataclass(frozen=True)
class Recommendation:
    chosen: ConfigOutcome | None
    closest: ConfigOutcome | None
    cost_rule: str
    evidence: list[str] = field(default_factory=list)

    def headline(self) -> str:
        if self.chosen is not None:
            return f"recommended: {self.chosen.name} ({self.chosen.settings})"
        if self.closest is not None:
            return f"none of the configurations PASSes the whole ramp; closest: {self.closest.name} (not recommended)"
        return "none of the configurations PASSes the whole ramp"

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.chosen.name if self.chosen else None,
            "closest": None if self.chosen or self.closest is None else self.closest.name,
            "cheapest_means": self.cost_rule,
            "headline": self.headline(),
            "evidence": self.evidence,
        }


def _why_not(outcome: ConfigOutcome) -> str | None:
    if outcome.oom_kills:
        return f"{outcome.oom_kills} OOM kill(s): never recommended"
    if not outcome.holds_ramp:
        held = f"held up to {outcome.breakpoint} %" if outcome.breakpoint is not None else "held no stage"
        return f"run {outcome.status}, {held}"
    return None


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def evidence_line(outcome: ConfigOutcome) -> str:
    stages = ", ".join(f"{s.stage} % {s.status}" for s in outcome.stages)
    top = outcome.stages[-1].stage if outcome.stages else None
    return (
        f"{outcome.name}: {outcome.status}; {stages}; OOM kills {outcome.oom_kills}; goodput at {top} % "
        f"{_percent(outcome.goodput_at(top))}; cost {outcome.cost:g}; run {outcome.run_dir or '(none)'}"
    )


def recommend(outcomes: list[ConfigOutcome], cost_rule: str) -> Recommendation:
    eligible = [o for o in outcomes if _why_not(o) is None]
    evidence = []
    for outcome in outcomes:
        why = _why_not(outcome)
        evidence.append(evidence_line(outcome) + (f" -- not eligible: {why}" if why else " -- eligible"))
    if eligible:
        chosen = min(eligible, key=lambda o: o.cost)  # min keeps the first of equals: grid order breaks ties
        cheaper = [o.name for o in outcomes if o.cost < chosen.cost]
        evidence.append(
            f"{chosen.name} is the cheapest of the {len(eligible)} eligible (cheapest: {cost_rule})"
            + (f"; the cheaper {', '.join(cheaper)} did not hold" if cheaper else "")
        )
        return Recommendation(chosen, None, cost_rule, evidence)
    if not outcomes:
        return Recommendation(None, None, cost_rule, evidence)
    closest = min(
        outcomes,
        key=lambda o: (
            o.oom_kills > 0,
            -(o.breakpoint if o.breakpoint is not None else -1),
            -(o.goodput_at(o.breakpoint) or 0.0),
            o.cost,
        ),
    )
    return Recommendation(None, closest, cost_rule, evidence)
