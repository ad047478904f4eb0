"""A finished sweep read back from its JSON (`kfchaos tune --json`, kfchaos.tune.table.document), so its page can be
drawn again without rerunning a configuration (`kfchaos tune --from-json FILE --html PAGE`).

The outcomes are read back as they were measured; the recommendation is not taken from the file but decided again by
the one rule (kfchaos.tune.recommend) over them and the file's `cheapest_means`, so a page never shows a pick the
rule would not make. Where the file's own pick differs (a file edited, or written under another rule) the page says
so (`Result.disagreement`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json
from kfchaos.tune.outcome import NOT_RUN, ConfigOutcome, StageOutcome
from kfchaos.tune.recommend import Recommendation, recommend
from kfchaos.tune.table import RESULT_KIND

STATUSES = ("PASS", "FAIL", "INCONCLUSIVE", NOT_RUN)


class _Read(BaseModel):
    # Fields a later version adds are ignored: what this one draws is all it needs.
    model_config = ConfigDict(extra="ignore")


class _Stage(_Read):
    stage: int = Field(ge=1, le=100)
    status: str = Field(pattern="^(" + "|".join(STATUSES) + ")$")
    requests: int = Field(0, ge=0)
    goodput: float | None = Field(None, ge=0, le=1)
    oom_kills: int | None = Field(None, ge=0)
    p99: float | None = Field(None, ge=0)
    p99_infinite: bool = False

    def outcome(self) -> StageOutcome:
        p99 = math.inf if self.p99_infinite else self.p99
        return StageOutcome(self.stage, self.status, self.requests, self.goodput, self.oom_kills, p99)


class _Configuration(_Read):
    name: str = Field(min_length=1)
    settings: str = ""
    cost: float = Field(ge=0)
    status: str = Field(pattern="^(PASS|FAIL|INCONCLUSIVE)$")
    oom_kills: int = Field(ge=0)
    stages: list[_Stage]
    run_dir: str = ""
    reasons: list[str] = Field(default_factory=list)

    def outcome(self) -> ConfigOutcome:
        stages = [s.outcome() for s in self.stages]
        return ConfigOutcome(
            self.name, self.settings, self.cost, self.status, stages, self.oom_kills, self.run_dir, self.reasons
        )


class _Recommendation(_Read):
    recommended: str | None = None
    cheapest_means: str


class _Document(_Read):
    kind: str = Field(pattern=f"^{RESULT_KIND}$")
    version: int = Field(ge=1, le=1)
    experiment: str
    grid: str
    p99_max: float | None = Field(None, gt=0)
    configurations: list[_Configuration] = Field(min_length=1)
    recommendation: _Recommendation


@dataclass(frozen=True)
class Result:
    experiment: str
    grid: str
    p99_max: float | None
    outcomes: list[ConfigOutcome]
    recommendation: Recommendation
    disagreement: str | None = None  # the file's own pick, where the rule picks otherwise


def parse_result(raw: object, source: str) -> Result:
    """The sweep in a TuneResult document (`source` names it in errors); KfchaosError naming the field."""
    try:
        parsed = _Document.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[:5]
        where = "; ".join(f"{'.'.join(str(part) for part in e['loc']) or '(document)'}: {e['msg']}" for e in first)
        raise KfchaosError(f"{source}: not a {RESULT_KIND} document: {where}") from None
    names = [c.name for c in parsed.configurations]
    if len(set(names)) != len(names):
        raise KfchaosError(f"{source}: configurations: names repeat ({', '.join(names)})")
    ramps = {tuple(s.stage for s in c.stages) for c in parsed.configurations}
    if len(ramps) != 1:
        raise KfchaosError(f"{source}: configurations: every configuration runs the same ramp; here they differ")
    outcomes = [c.outcome() for c in parsed.configurations]
    chosen = recommend(outcomes, parsed.recommendation.cheapest_means)
    ours = chosen.chosen.name if chosen.chosen else None
    theirs = parsed.recommendation.recommended
    disagreement = None
    if ours != theirs:
        disagreement = (
            f"the file recommends {theirs or 'none'}, but by the rule over its own outcomes it is {ours or 'none'}: "
            "this shows the rule's"
        )
    return Result(parsed.experiment, parsed.grid, parsed.p99_max, outcomes, chosen, disagreement)


def load_result(path: str | Path) -> Result:
    """The sweep in a TuneResult JSON file (`kfchaos tune --json`)."""
    return parse_result(load_json(path, "tune result"), str(path))
