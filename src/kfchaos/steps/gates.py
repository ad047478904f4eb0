"""Gate and skip: the pure steps of the ramp. A gate continues only on a result that says it may proceed."""

from __future__ import annotations

from kfchaos.steps.results import StepResult, dump_history, load_history

CONTINUE = "continue"
STOP = "stop"


def skipped(stage: int, reason: str) -> str:
    """The Else branch of a gated step: a result that records how far the ramp got, and stops it."""
    step = "stage" if stage else "inject"
    return StepResult(step=step, stage=stage, status="SKIPPED", proceed=False, reasons=[reason]).to_json()


def gate(stage: int, result: str, history: str) -> tuple[str, str]:
    """('continue' | 'stop', history with `result` appended)."""
    parsed = StepResult.from_json(result, f"result of stage {stage}")
    results = [*load_history(history), parsed]
    return (CONTINUE if parsed.proceed else STOP), dump_history(results)
