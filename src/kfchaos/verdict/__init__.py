"""SLO verdict: per-stage and overall PASS / FAIL / INCONCLUSIVE from per-request records.

Public entry points: `evaluate()` (whole experiment), `gate()` (one stage, for the ramp), and the result
types; `Verdict.to_dict()` is the JSON contract (docs/verdict.md).
"""

from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.gate import gate
from kfchaos.verdict.model import Check, GateResult, StageResult, Status, Verdict
from kfchaos.verdict.requests import RecordsError, Requests, load_requests

__all__ = [
    "Check",
    "GateResult",
    "RecordsError",
    "Requests",
    "StageResult",
    "Status",
    "Verdict",
    "evaluate",
    "gate",
    "load_requests",
]
