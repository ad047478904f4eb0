"""The verdict's result types. `Verdict.to_dict()` is the JSON contract (docs/verdict.md shows its shape)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


_RANK = {Status.PASS: 0, Status.INCONCLUSIVE: 1, Status.FAIL: 2}


def worst(statuses: list[Status]) -> Status:
    """A clear failure outranks missing data, and missing data outranks a pass (as in Argo's worst-phase rule)."""
    return max(statuses, key=_RANK.__getitem__, default=Status.INCONCLUSIVE)


def _number(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Check:
    """One decision: `value` against `threshold`, with its confidence `interval` and the `samples` behind it."""

    name: str
    status: Status
    reason: str
    value: float | None = None
    threshold: float | None = None
    interval: tuple[float, float] | None = None
    samples: int = 0
    unit: str = ""
    gating: bool = True  # False: reported for information, does not change the stage or overall status
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status.value,
            "gating": self.gating,
            "value": _number(self.value),
            "threshold": _number(self.threshold),
            "interval": None if self.interval is None else [_number(self.interval[0]), _number(self.interval[1])],
            "samples": self.samples,
            "unit": self.unit,
            "reason": self.reason,
            "details": self.details,
        }


def status_of(checks: list[Check]) -> Status:
    gating = [c.status for c in checks if c.gating]
    return worst(gating) if gating else Status.INCONCLUSIVE


@dataclass(frozen=True)
class GateResult:
    """A stage gate: abort rules over time windows plus replay validity. `proceed` only when it clearly passed."""

    stage: int | None
    status: Status
    checks: list[Check]

    @property
    def proceed(self) -> bool:
        return self.status is Status.PASS

    @property
    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.reason}" for c in self.checks if c.status is not Status.PASS]

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": self.status.value,
            "proceed": self.proceed,
            "reasons": self.reasons,
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass(frozen=True)
class StageResult:
    stage: int
    status: Status
    requests: int
    window: tuple[float, float] | None
    checks: list[Check]
    # The stage gate (whether the ramp may go on), from the same checks: the one place it is computed.
    gate: GateResult | None = None

    def check(self, name: str) -> Check:
        for item in self.checks:
            if item.name == name:
                return item
        raise KeyError(f"stage {self.stage} has no check {name!r}; has {[c.name for c in self.checks]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": self.status.value,
            "requests": self.requests,
            "window": None if self.window is None else [self.window[0], self.window[1]],
            "reasons": [f"{c.name}: {c.reason}" for c in self.checks if c.gating and c.status is not Status.PASS],
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass(frozen=True)
class Verdict:
    experiment: str
    version: str
    status: Status
    confidence: float
    stages: list[StageResult]
    checks: list[Check]  # experiment-wide: fault verification, metrics source, recovery, baseline
    baseline: dict[str, Any] | None
    warnings: list[str]

    @property
    def reasons(self) -> list[str]:
        out = [f"{c.name}: {c.reason}" for c in self.checks if c.gating and c.status is not Status.PASS]
        for stage in self.stages:
            out += [f"stage {stage.stage}: {r}" for r in stage.to_dict()["reasons"]]
        return out

    def stage(self, percent: int) -> StageResult:
        for item in self.stages:
            if item.stage == percent:
                return item
        raise KeyError(f"no stage {percent}; stages are {[s.stage for s in self.stages]}")

    def check(self, name: str) -> Check:
        for item in self.checks:
            if item.name == name:
                return item
        raise KeyError(f"no experiment-wide check {name!r}; has {[c.name for c in self.checks]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "kfchaos.Verdict",
            "version": 1,
            "experiment": {"name": self.experiment, "version": self.version},
            "status": self.status.value,
            "confidence": self.confidence,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "baseline": self.baseline,
            "checks": [c.to_dict() for c in self.checks],
            "stages": [s.to_dict() for s in self.stages],
        }
