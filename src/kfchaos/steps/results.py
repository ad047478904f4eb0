"""The result every gated step returns, as JSON: what the gate reads and what the verdict and audit collect."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kfchaos.errors import KfchaosError

Status = Literal["PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"]


@dataclass
class StepResult:
    step: str  # steady_state, inject, stage
    stage: int  # stage percent; 0 for the steps before the ramp
    status: Status
    proceed: bool  # whether the ramp may go on after this step
    reasons: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, what: str = "step result") -> StepResult:
        try:
            data = json.loads(text)
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise KfchaosError(f"{what} is not a kfchaos step result: {exc}") from None


def load_history(text: str) -> list[StepResult]:
    try:
        items = json.loads(text or "[]")
    except ValueError as exc:
        raise KfchaosError(f"history is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise KfchaosError("history must be a JSON list of step results")
    return [StepResult(**item) for item in items]


def dump_history(results: list[StepResult]) -> str:
    return json.dumps([asdict(r) for r in results], sort_keys=True)


def describe(value: Any) -> Any:
    """A JSON-able view of whatever the backend returns (handles, event lists, dataclasses)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [describe(v) for v in value]
    if hasattr(value, "to_dict"):
        return describe(value.to_dict())
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return describe(asdict(value))
    return repr(value)
