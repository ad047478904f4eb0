"""Steady state, replay and collect: the steps that send traffic and judge it."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from kfchaos.spec import Experiment
from kfchaos.steps import gates, seams, targetlease
from kfchaos.steps.context import experiment_from_text, task_run_id
from kfchaos.steps.results import StepResult
from kfchaos.steps.setup import load_optional_baseline
from kfchaos.steps.stopping import guarded
from kfchaos.targetauth import require_target_credential


def _judge(
    experiment: Experiment,
    stage: int,
    records_path: str,
    baseline_path: str,
    valid: Any,
    fault_windows: list[dict[str, Any]] | None = None,
    fault_free: bool = False,
    duration: float | None = None,
) -> tuple[Any, Any]:
    """(StageResult, GateResult) of one stage's records: one evaluation, whose stage gate is the gate.
    `fault_free`: a probe replayed without any fault (seams.replay_stage leaves them out of its plan) is judged
    as the experiment without faults, so no planned fault is looked for in it. `duration`: a probe shorter
    than a stage is judged against its own length (its load check: kfchaos.verdict.load)."""
    from kfchaos.faults.activity import FaultActivity
    from kfchaos.records import unfinished_stages
    from kfchaos.verdict import evaluate, load_requests

    valid = unfinished_stages(records_path).get(stage, valid)  # a replay cut by its disk: not a whole stage
    if fault_free:
        experiment = experiment.model_copy(update={"spec": experiment.spec.model_copy(update={"faults": []})})
    if duration is not None:
        traffic = experiment.spec.traffic.model_copy(update={"stage_duration": duration})
        experiment = experiment.model_copy(update={"spec": experiment.spec.model_copy(update={"traffic": traffic})})
    requests = load_requests(records_path)
    baseline = load_optional_baseline(baseline_path)
    window = (float(requests.intended.min()), float(requests.intended.max())) if len(requests) else (0.0, 0.0)
    metrics = seams.metrics_snapshot(experiment, window)
    coverage = None
    if fault_windows is not None:
        coverage = {stage: [FaultActivity.from_dict(item) for item in fault_windows]}
    verdict = evaluate(
        requests,
        experiment,
        baseline=baseline,
        metrics=metrics,
        stage_valid={stage: valid} if valid is not None else None,
        fault_coverage=coverage,
    )
    result = verdict.stage(stage)
    return result, result.gate


@guarded
def steady_state(experiment_text: str, experiment_dir: str, target: str, run_id: str, baseline_path: str) -> str:
    """A short replay at the first stage's rate, no faults; a clear failure (not at baseline) stops the run."""
    run_id = task_run_id(run_id)
    experiment = experiment_from_text(experiment_text)
    require_target_credential(experiment)  # before any fault: a missing token is a clear stop, not 401s
    with targetlease.holding(experiment, run_id, target) as lease:
        if lease.lost:  # another run's turn (or this run's is over): not one request
            reasons = [f"not run: {lease.lost}"]
            return StepResult("steady_state", 0, "INCONCLUSIVE", False, reasons, {"run_id": run_id}).to_json()
        first = experiment.spec.traffic.stages[0]
        probe = min(experiment.spec.traffic.warmup or 60.0, experiment.spec.traffic.stage_duration)
        with tempfile.TemporaryDirectory(prefix="kfchaos-steady-") as tmp:
            records = str(Path(tmp) / "steady.parquet")
            summary = seams.replay_stage(
                experiment, first, experiment_dir, target, records, duration=probe, fault_active=False
            )
            stage_result, gate_result = _judge(
                experiment, first, records, baseline_path, None, fault_free=True, duration=probe
            )
    # Proceed unless the probe clearly failed: a short probe often lacks samples or metrics, which the final
    # verdict reports as INCONCLUSIVE anyway; a FAIL (not at baseline, abort rule hit) means do not inject.
    failed = [c for c in stage_result.checks if c.gating and c.status.value == "FAIL"]
    ok = not failed and gate_result.proceed
    reasons = [f"{c.name}: {c.reason}" for c in failed] + ([] if gate_result.proceed else list(gate_result.reasons))
    if not ok:
        reasons = ["not at steady state: " + "; ".join(reasons)]
    detail = {"probe_seconds": probe, "replay": summary, "stage": stage_result.to_dict(), "run_id": run_id}
    return StepResult("steady_state", 0, stage_result.status.value, ok, reasons, detail).to_json()


@guarded
def replay(
    experiment_text: str,
    experiment_dir: str,
    target: str,
    run_id: str,
    stage: int,
    records_path: str,
    decision: str = gates.CONTINUE,
) -> str:
    """Replay one stage under the faults the file puts on it: applied at their first stage's start, watched
    while the replay runs, removed after their last stage (kfchaos.steps.stagefaults). A stage not in this
    experiment's ramp (the generic pipeline has five), or after a gate that stopped the ramp (`decision`),
    replays nothing and injects nothing; its records file is empty."""
    from kfchaos.records import REQUEST_SCHEMA
    from kfchaos.steps.stagefaults import mark_fault_active, under_faults
    from kfchaos.traffic.recorder import write_parquet

    if gates.gated(decision):
        write_parquet(REQUEST_SCHEMA.empty_table(), records_path)
        return json.dumps({"stage": stage, "gated": gates.GATED})
    run_id = task_run_id(run_id)
    experiment = experiment_from_text(experiment_text)
    if stage not in experiment.spec.traffic.stages:
        write_parquet(REQUEST_SCHEMA.empty_table(), records_path)
        return json.dumps({"stage": stage, "not_in_ramp": True})

    def run() -> dict[str, Any]:
        # fault_active is written afterwards from what was verified, not from what was meant.
        return seams.replay_stage(
            experiment, stage, experiment_dir, target, records_path, duration=None, fault_active=False
        )

    with targetlease.holding(experiment, run_id, target) as lease:
        if lease.lost:  # recorded as a stage the ramp did not reach (kfchaos.steps.gates), which stops the ramp
            write_parquet(REQUEST_SCHEMA.empty_table(), records_path)
            return json.dumps({"stage": stage, "gated": f"the target's lease: {lease.lost}"})
        summary, faults = under_faults(experiment, run_id, stage, run, target=target)
    if lease.lost:  # lost while the stage ran: what it measured is not this run's alone
        faults["interference"] = [*faults.get("interference", []), f"the target's lease: {lease.lost}"]
    try:
        faults["marked_requests"] = mark_fault_active(records_path, faults["fault_windows"])
    except OSError as exc:  # the disk that cut the replay: the records stand as written, unmarked, and say so
        reason = f"requests under fault not marked: the records could not be rewritten ({exc.strerror or exc})"
        faults["reasons"] = [*faults.get("reasons", []), reason]
    from kfchaos.faults.lorachurn import request_problems

    faults["reasons"] = [*faults.get("reasons", []), *request_problems(records_path, experiment, stage)]
    return json.dumps({**summary, "stage": stage, "run_id": run_id, "faults": faults}, sort_keys=True, default=str)


def collect(
    experiment_text: str, stage: int, replay_summary: str, baseline_path: str, records_path: str
) -> tuple[str, dict[str, float]]:
    """(stage result JSON, figures for KFP Metrics)."""
    summary = json.loads(replay_summary)
    if summary.get("gated"):
        return gates.skipped(stage, str(summary["gated"])), {}
    if summary.get("not_in_ramp"):
        result = StepResult("stage", stage, "SKIPPED", True, [f"stage {stage} is not in this experiment's ramp"])
        return result.to_json(), {}
    faults = summary.pop("faults", None) or {}
    # A sharded stage whose shards do not make up its plan (kfchaos.steps.shards): nothing is earned either.
    replay_reasons = list(summary.pop("replay_reasons", None) or [])
    # The replayer's own `valid` judges send lag against the absolute limit, burst requests included; the
    # verdict's replay check judges it from the records (bursts left out, tolerance relative to the latency):
    # one rule, applied there.
    windows = faults.get("fault_windows") if faults.get("fault_windows") else None
    experiment = experiment_from_text(experiment_text)  # once per step: _judge takes the parsed experiment
    stage_result, stage_gate = _judge(experiment, stage, records_path, baseline_path, None, windows)
    figures: dict[str, float] = {"requests": float(stage_result.requests)}
    for check in stage_result.checks:
        # KFP Metrics are protobuf numbers: an infinite value (e.g. a P99 made of timeouts) cannot be logged.
        if check.value is not None and math.isfinite(float(check.value)):
            figures[check.name] = float(check.value)
    reasons = list(stage_result.to_dict()["reasons"]) + list(faults.get("reasons") or []) + replay_reasons
    detail = {
        "replay": summary,
        "stage": stage_result.to_dict(),
        "gate": stage_gate.to_dict(),
        "plan_hash": summary.get("plan_hash"),
        "chaos_objects": faults.get("chaos_objects") or [],
        "fault_windows": faults.get("fault_windows") or [],
        "fault_actions": faults.get("fault_actions") or [],  # the LoRA churn's calls (kfchaos.faults.lorachurn)
    }
    interference = list(faults.get("interference") or [])
    reasons += interference
    detail["interference"] = {"found": interference, "notes": faults.get("interference_notes") or []}
    status = stage_result.status.value
    blocked = bool(faults.get("reasons") or replay_reasons)
    if blocked and status == "PASS":  # a fault not shown injected or removed, a shard missing: nothing is earned
        status = "INCONCLUSIVE"
    if interference:  # another's fault, load or hand in the window: neither its PASS nor its FAIL is this run's
        status = "INCONCLUSIVE"
    proceed = stage_gate.proceed and not blocked and not interference
    return StepResult("stage", stage, status, proceed, reasons, detail).to_json(), figures
