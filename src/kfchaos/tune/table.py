"""The sweep's result as a terminal table and as one JSON document (`kfchaos tune --json`)."""

from __future__ import annotations

from typing import Any

from kfchaos.tune.outcome import ConfigOutcome
from kfchaos.tune.recommend import Recommendation


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table(outcomes: list[ConfigOutcome], recommendation: Recommendation) -> str:
    ramp = [s.stage for s in outcomes[0].stages] if outcomes else []
    header = ["configuration", "cost", "verdict", "breakpoint", "OOM", *[f"{s}%" for s in ramp], "goodput", "settings"]
    rows = []
    for outcome in outcomes:
        mark = "*" if recommendation.chosen is outcome else " "
        top = ramp[-1] if ramp else None
        rows.append(
            [
                f"{mark}{outcome.name}",
                f"{outcome.cost:g}",
                outcome.status,
                "-" if outcome.breakpoint is None else f"{outcome.breakpoint}%",
                str(outcome.oom_kills),
                *[s.status for s in outcome.stages],
                _percent(outcome.goodput_at(top)),
                outcome.settings,
            ]
        )
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]  # fmt: skip
    lines += ["", recommendation.headline(), f"cheapest means: {recommendation.cost_rule}", "evidence:"]
    lines += [f"  - {line}" for line in recommendation.evidence]
    return "\n".join(lines)


RESULT_KIND = "kfchaos.TuneResult"


def document(
    experiment: str,
    grid: str,
    outcomes: list[ConfigOutcome],
    recommendation: Recommendation,
    p99_max: float | None = None,
) -> dict[str, Any]:
    """The sweep's result; `p99_max` (seconds, the experiment's SLO) is drawn on the frontier chart."""
    return {
        "kind": RESULT_KIND,
        "version": 1,
        "experiment": experiment,
        "grid": grid,
        "p99_max": p99_max,
        "configurations": [o.to_dict() for o in outcomes],
        "recommendation": recommendation.to_dict(),
    }
