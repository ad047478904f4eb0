"""Failure-mode knowledge base: failing checks -> known failure modes, evidence to collect, remediation.

The data is src/kfchaos/data/failure_modes.yaml; `match()` ranks the modes whose checks failed, those that
also match a fault type of the experiment first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import Field

from kfchaos.types import StrictModel


class FailureMode(StrictModel):
    id: str
    title: str
    checks: list[str] = Field(min_length=1)
    faults: list[str] = Field(default_factory=list)
    explanation: str
    evidence: list[str] = Field(min_length=1)
    remediation: list[str] = Field(min_length=1)


@dataclass(frozen=True)
class Match:
    mode: FailureMode
    checks: list[str]  # the failing checks that point here
    fault_match: bool

    def to_dict(self) -> dict[str, Any]:
        return {**self.mode.model_dump(), "matched_checks": self.checks, "fault_match": self.fault_match}


@cache
def failure_modes() -> tuple[FailureMode, ...]:
    text = resources.files("kfchaos").joinpath("data/failure_modes.yaml").read_text(encoding="utf-8")
    return tuple(FailureMode.model_validate(item) for item in yaml.safe_load(text))


def failing_checks(verdict: Mapping[str, Any], statuses: Iterable[str] = ("FAIL",)) -> list[str]:
    """Names of the checks with one of `statuses` in a verdict's JSON (stage and experiment-wide)."""
    wanted = set(statuses)
    names = [c["name"] for c in verdict.get("checks", []) if c["status"] in wanted]
    for stage in verdict.get("stages", []):
        names += [c["name"] for c in stage.get("checks", []) if c["status"] in wanted]
    return list(dict.fromkeys(names))


def match(verdict: Mapping[str, Any], fault_types: Iterable[str] = ()) -> list[Match]:
    """Known failure modes for the verdict's failing checks (and the replay check when INCONCLUSIVE)."""
    failing = set(failing_checks(verdict))
    failing |= {n for n in failing_checks(verdict, ("INCONCLUSIVE",)) if n == "replay"}
    faults = set(fault_types)
    found = []
    for mode in failure_modes():
        hits = [c for c in mode.checks if c in failing]
        if hits:
            found.append(Match(mode, hits, bool(faults & set(mode.faults))))
    return sorted(found, key=lambda m: (not m.fault_match, -len(m.checks)))
