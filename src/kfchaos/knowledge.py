"""Failure-mode knowledge base: failing checks -> known failure modes, the checklist of evidence to look at,
remediation.

The data is src/kfchaos/data/failure_modes.yaml. `match()` finds the modes whose checks failed (or whose
signals the OOM evidence bundle found) and ranks them by the evidence actually collected: a mode whose
signals were seen in the bundle outranks one only guessed from a check and the fault type; each match says
which of its signals were found, collected but not seen, or not collected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import Field, field_validator

from kfchaos.evidence.model import FINDINGS, WEAK_ABSENCE
from kfchaos.types import StrictModel


class FailureMode(StrictModel):
    id: str
    title: str
    checks: list[str] = Field(min_length=1)
    faults: list[str] = Field(default_factory=list)
    # Findings of the evidence bundle (kfchaos.evidence.model.FINDINGS) that confirm this mode.
    signals: list[str] = Field(default_factory=list)
    explanation: str
    evidence: list[str] = Field(min_length=1)  # the checklist: what to look at, which series and objects
    remediation: list[str] = Field(min_length=1)
    sources: list[str] = Field(default_factory=list)  # upstream docs/source the mode rests on

    @field_validator("signals")
    @classmethod
    def _known_signals(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(FINDINGS))
        if unknown:
            raise ValueError(f"unknown signal(s) {unknown}; known: {sorted(FINDINGS)}")
        return value


@dataclass(frozen=True)
class Match:
    mode: FailureMode
    checks: list[str]  # the failing checks that point here
    fault_match: bool
    found: list[str] = field(default_factory=list)  # signals the evidence bundle saw
    not_seen: list[str] = field(default_factory=list)  # signals collected but not seen
    not_collected: list[str] = field(default_factory=list)  # signals nobody could read

    @property
    def evidence_score(self) -> int:
        """Signals seen: a match confirmed by evidence ranks above one only guessed."""
        return len(self.found)

    @property
    def contradicted(self) -> int:
        """Signals collected and not seen, leaving out those whose absence proves little (WEAK_ABSENCE)."""
        return len([s for s in self.not_seen if s not in WEAK_ABSENCE])

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.mode.model_dump(),
            "matched_checks": self.checks,
            "fault_match": self.fault_match,
            "evidence_found": self.found,
            "evidence_not_seen": self.not_seen,
            "evidence_not_collected": self.not_collected,
        }


@cache
def failure_modes() -> tuple[FailureMode, ...]:
    text = resources.files("kfchaos").joinpath("data/failure_modes.yaml").read_text(encoding="utf-8")
    return tuple(FailureMode.model_validate(item) for item in yaml.safe_load(text))


def rank(found: Match) -> tuple[int, int, int, float, bool]:
    """Sort key, best first, by the evidence the run holds (the one ranking: the report shows this order):
    1. the most signals the evidence bundle saw (a mode confirmed by what was collected);
    2. the fewest signals it collected and did not see (evidence against the mode);
    3. the most failing checks pointing at the mode, a fault of its kind injected by this experiment counting
       as one more (the run's own stimulus);
    4. the larger share of the mode's own checks that failed; then a mode the experiment provoked first."""
    share = len(found.checks) / len(found.mode.checks)
    return (
        -found.evidence_score,
        found.contradicted,
        -(len(found.checks) + found.fault_match),
        -share,
        not found.fault_match,
    )


def failing_checks(verdict: Mapping[str, Any], statuses: Iterable[str] = ("FAIL",)) -> list[str]:
    """Names of the checks with one of `statuses` in a verdict's JSON (stage and experiment-wide)."""
    wanted = set(statuses)
    names = [c["name"] for c in verdict.get("checks", []) if c["status"] in wanted]
    for stage in verdict.get("stages", []):
        names += [c["name"] for c in stage.get("checks", []) if c["status"] in wanted]
    return list(dict.fromkeys(names))


def match(
    verdict: Mapping[str, Any], fault_types: Iterable[str] = (), findings: Mapping[str, bool] | None = None
) -> list[Match]:
    """Known failure modes for the verdict's failing checks (and the replay check when INCONCLUSIVE), and for
    the signals the evidence bundle found (`findings`: name -> seen; absent: not collected; None: no bundle).
    Best first (`rank`)."""
    failing = set(failing_checks(verdict))
    failing |= {n for n in failing_checks(verdict, ("INCONCLUSIVE",)) if n == "replay"}
    faults = set(fault_types)
    seen = {name for name, value in (findings or {}).items() if value}
    found = []
    for mode in failure_modes():
        # A mode's check also matches its per-dependency variants (abort.dependency_p99 -> abort.dependency_p99.db).
        hits = [c for c in mode.checks if c in failing or any(f.startswith(f"{c}.") for f in failing)]
        confirmed = [s for s in mode.signals if s in seen]
        if not hits and not confirmed:
            continue
        found.append(
            Match(
                mode,
                hits,
                bool(faults & set(mode.faults)),
                confirmed,
                [s for s in mode.signals if findings is not None and findings.get(s) is False],
                [s for s in mode.signals if findings is None or s not in findings],
            )
        )
    return sorted(found, key=rank)
