"""Gate and skip: the pure steps of the ramp. A gate continues only on a result that says it may proceed.

A stage after a gate that stopped the ramp still has its tasks in the pipeline (the pipeline has no branches: KFP
backends before 2.2 cannot run dsl.If/dsl.Else/dsl.OneOf, docs/pipelines.md), and they do nothing: its replay
sends no request and applies no fault (`gated`), and its collect step records it as skipped, which stops the ramp
again."""

from __future__ import annotations

from kfchaos.steps.results import StepResult, dump_history, load_history

CONTINUE = "continue"
STOP = "stop"


GATED = "an earlier gate stopped the ramp"


def gated(decision: str) -> bool:
    """True when the gate before this stage stopped the ramp: the stage must neither send nor inject."""
    return decision != CONTINUE


def skipped(stage: int, reason: str) -> str:
    """The result of a stage the ramp did not reach: it records how far the ramp got, and stops it."""
    step = "stage" if stage else "inject"
    return StepResult(step=step, stage=stage, status="SKIPPED", proceed=False, reasons=[reason]).to_json()


def gate(stage: int, result: str, history: str) -> tuple[str, str]:
    """('continue' | 'stop', history with `result` appended)."""
    parsed = StepResult.from_json(result, f"result of stage {stage}")
    results = [*load_history(history), parsed]
    return (CONTINUE if parsed.proceed else STOP), dump_history(results)
