"""Steady state, replay and collect: the steps that send traffic and judge it."""

from __future__ import annotations

import json
import math
from typing import Any

from kfchaos.steps import seams
from kfchaos.steps.context import experiment_from_text
from kfchaos.steps.results import StepResult
from kfchaos.steps.setup import load_optional_baseline


def _judge(experiment_text: str, stage: int, records_path: str, baseline_path: str, valid: Any) -> tuple[Any, Any]:
    """(StageResult, GateResult) of one stage's records."""
    from kfchaos.verdict import evaluate, gate, load_requests

    experiment = experiment_from_text(experiment_text)
    requests = load_requests(records_path)
    baseline = load_optional_baseline(baseline_path)
    window = (float(requests.intended.min()), float(requests.intended.max())) if len(requests) else (0.0, 0.0)
    metrics = seams.metrics_snapshot(experiment, window)
    verdict = evaluate(
        requests,
        experiment,
        baseline=baseline,
        metrics=metrics,
        stage_valid={stage: valid},
    )
    stage_gate = gate(
        requests,
        experiment.spec.abort,
        metrics=metrics,
        max_send_lag_p99=experiment.spec.traffic.max_send_lag_p99,
        replay_valid=valid,
        stage=stage,
    )
    return verdict.stage(stage), stage_gate


def steady_state(experiment_text: str, experiment_dir: str, target: str, run_id: str, baseline_path: str) -> str:
    """A short replay at the first stage's rate, no faults; a clear failure (not at baseline) stops the run."""
    import tempfile
    from pathlib import Path

    from kfchaos.kfp.targetsecret import require_target_credential

    experiment = experiment_from_text(experiment_text)
    require_target_credential(experiment)  # before any fault: a missing token is a clear stop, not 401s
    first = experiment.spec.traffic.stages[0]
    probe = min(experiment.spec.traffic.warmup or 60.0, experiment.spec.traffic.stage_duration)
    with tempfile.TemporaryDirectory(prefix="kfchaos-steady-") as tmp:
        records = str(Path(tmp) / "steady.parquet")
        summary = seams.replay_stage(
            experiment, first, experiment_dir, target, records, duration=probe, fault_active=False
        )
        stage_result, gate_result = _judge(experiment_text, first, records, baseline_path, summary.get("valid"))
    # Proceed unless the probe clearly failed: a short probe often lacks samples or metrics, which the final
    # verdict reports as INCONCLUSIVE anyway; a FAIL (not at baseline, abort rule hit) means do not inject.
    failed = [c for c in stage_result.checks if c.gating and c.status.value == "FAIL"]
    ok = not failed and gate_result.proceed
    reasons = [f"{c.name}: {c.reason}" for c in failed] + ([] if gate_result.proceed else list(gate_result.reasons))
    if not ok:
        reasons = ["not at steady state: " + "; ".join(reasons)]
    detail = {"probe_seconds": probe, "replay": summary, "stage": stage_result.to_dict(), "run_id": run_id}
    return StepResult("steady_state", 0, stage_result.status.value, ok, reasons, detail).to_json()


def replay(experiment_text: str, experiment_dir: str, target: str, run_id: str, stage: int, records_path: str) -> str:
    """Replay one stage. A stage not in this experiment's ramp (the generic pipeline has five) replays nothing."""
    experiment = experiment_from_text(experiment_text)
    if stage not in experiment.spec.traffic.stages:
        return json.dumps({"stage": stage, "not_in_ramp": True})
    # Faults were injected before the ramp and stay until removal (their duration covers their stages).
    active = any(stage in experiment.fault_stages(f) for f in seams.cluster_faults(experiment))
    summary = seams.replay_stage(
        experiment, stage, experiment_dir, target, records_path, duration=None, fault_active=active
    )
    return json.dumps({**summary, "stage": stage, "run_id": run_id}, sort_keys=True, default=str)


def collect(
    experiment_text: str, stage: int, replay_summary: str, baseline_path: str, records_path: str
) -> tuple[str, dict[str, float]]:
    """(stage result JSON, figures for KFP Metrics)."""
    summary = json.loads(replay_summary)
    if summary.get("not_in_ramp"):
        result = StepResult("stage", stage, "SKIPPED", True, [f"stage {stage} is not in this experiment's ramp"])
        return result.to_json(), {}
    stage_result, stage_gate = _judge(experiment_text, stage, records_path, baseline_path, summary.get("valid"))
    figures: dict[str, float] = {"requests": float(stage_result.requests)}
    for check in stage_result.checks:
        # KFP Metrics are protobuf numbers: an infinite value (e.g. a P99 made of timeouts) cannot be logged.
        if check.value is not None and math.isfinite(float(check.value)):
            figures[check.name] = float(check.value)
    reasons = list(stage_result.to_dict()["reasons"])
    if not stage_gate.proceed:
        reasons += [f"gate: {r}" for r in stage_gate.reasons]
    detail = {
        "replay": summary,
        "stage": stage_result.to_dict(),
        "gate": stage_gate.to_dict(),
        "plan_hash": summary.get("plan_hash"),
    }
    status = stage_result.status.value
    return StepResult("stage", stage, status, stage_gate.proceed, reasons, detail).to_json(), figures
