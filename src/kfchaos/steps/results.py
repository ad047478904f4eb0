"""The result every gated step returns, as JSON: what the gate reads and what the verdict and audit collect."""

from __future__ import annotations

import base64
import binascii
import json
import zlib
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


# The history is a task parameter, and Argo hands a task's whole template, its parameters' values included, to the
# executor's init container as one environment variable (ARGO_TEMPLATE), which Linux caps at 128 KiB
# (MAX_ARG_STRLEN): past it the pod fails with "exec /usr/local/bin/argoexec: argument list too long"
# (argoproj/argo-workflows#7586, #12190, #14250). KFP's driver puts the executor's input in the template twice (the
# pod-spec-patch parameter and podSpecPatch), each time escaped, so the parameters of one task get about 40 KiB in
# all. A 2-stage run's plain history was 27.5 KiB on the real node (about 10 KiB a stage): a 5-stage ramp's verdict
# task could never start. So the history travels compressed (zlib, then base64, which JSON need not escape): that
# history packed to 7.7 KiB, and unescaped it costs the template less still. Plain JSON is still read, as older
# runs wrote it.
HISTORY_PACKED = "zlib+base64:"
MAX_HISTORY_BYTES = 64 << 20  # unpacked: far above any run's history, and no bomb gets past it


def load_history(text: str) -> list[StepResult]:
    if text.startswith(HISTORY_PACKED):
        text = _unpack(text[len(HISTORY_PACKED) :])
    try:
        items = json.loads(text or "[]")
    except ValueError as exc:
        raise KfchaosError(f"history is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise KfchaosError("history must be a JSON list of step results")
    return [StepResult(**item) for item in items]


def dump_history(results: list[StepResult]) -> str:
    plain = json.dumps([asdict(r) for r in results], sort_keys=True)
    return HISTORY_PACKED + base64.b64encode(zlib.compress(plain.encode(), 9)).decode("ascii")


def _unpack(packed: str) -> str:
    try:
        inflate = zlib.decompressobj()
        data = inflate.decompress(base64.b64decode(packed, validate=True), MAX_HISTORY_BYTES)
    except (binascii.Error, zlib.error) as exc:
        raise KfchaosError(f"history is not packed as {HISTORY_PACKED!r} says: {exc}") from None
    if inflate.unconsumed_tail or not inflate.eof:
        raise KfchaosError(f"history unpacks to more than {MAX_HISTORY_BYTES} bytes, or is cut short")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KfchaosError(f"history is not UTF-8 text: {exc}") from None


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
