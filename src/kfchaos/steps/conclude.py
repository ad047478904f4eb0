"""Verdict and report: the overall verdict from every step's result, the reports, and the audit record."""

from __future__ import annotations

import html
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from kfchaos import audit, safefile
from kfchaos.errors import KfchaosError
from kfchaos.faults.activity import run_fault_windows
from kfchaos.steps import seams, targetlease
from kfchaos.steps.context import task_run_id
from kfchaos.steps.results import StepResult, load_history

GIT_COMMIT_ENV = "KFCHAOS_GIT_COMMIT"  # baked into the image by the Dockerfile (build arg)


@dataclass
class Outcome:
    verdict: str
    figures: dict[str, float] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)


_RANK = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}


def _judge_step(result: StepResult) -> tuple[str, str | None] | None:
    """(status, reason) a step contributes to the overall verdict; None when it contributes nothing."""
    if result.status == "SKIPPED":
        if result.proceed:  # a stage outside this experiment's ramp (generic pipeline)
            return None
        return "INCONCLUSIVE", f"{_label(result)} skipped: {'; '.join(result.reasons)}"
    if result.step == "steady_state" and result.proceed:
        return None  # the probe only decides whether to inject; the stages are what is judged
    if result.step == "steady_state":
        # Faults were never injected, so nothing about resilience was learned: INCONCLUSIVE, not FAIL.
        return "INCONCLUSIVE", f"{_label(result)}: {'; '.join(result.reasons)}"
    reason = None if result.status == "PASS" else f"{_label(result)}: {'; '.join(result.reasons)}"
    return result.status, reason


def _label(result: StepResult) -> str:
    return f"stage {result.stage}%" if result.step == "stage" else result.step.replace("_", " ")


def _baseline_p99(baseline_text: str) -> float | None:
    """The baseline's P99 for the report's band (the baseline step already checked its hash)."""
    from pydantic import ValidationError

    from kfchaos.baseline import Baseline

    if not baseline_text.strip():
        return None
    try:
        return Baseline.model_validate(yaml.safe_load(baseline_text)).p99()
    except (yaml.YAMLError, ValidationError):
        return None


def _baseline_mapping(baseline_text: str) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(baseline_text) if baseline_text.strip() else None
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def _run_metrics(experiment: Any, started: float | None) -> Any | None:
    """The run's series (KV-cache usage, OOM kills) for the report's plots; None where there is no Prometheus."""
    if started is None:
        return None
    try:
        return seams.metrics_snapshot(experiment, (float(started), time.time()))
    except KfchaosError:
        return None


def _failing_checks(steps: list[dict[str, Any]]) -> list[str]:
    """Names of the FAIL/INCONCLUSIVE checks of the stage steps (what the evidence trigger reads)."""
    names = []
    for step in steps:
        stage = (step.get("detail") or {}).get("stage") if isinstance(step.get("detail"), dict) else None
        for check in (stage or {}).get("checks", []) if isinstance(stage, dict) else []:
            if isinstance(check, dict) and check.get("status") in ("FAIL", "INCONCLUSIVE"):
                names.append(str(check.get("name")))
    return names


def overall(results: list[StepResult], recovery: dict[str, Any] | None) -> tuple[str, list[str]]:
    """Worst of the steps (FAIL > INCONCLUSIVE > PASS); no stage results at all is INCONCLUSIVE."""
    statuses: list[str] = []
    reasons: list[str] = []
    for result in results:
        judged = _judge_step(result)
        if judged is None:
            continue
        statuses.append(judged[0])
        if judged[1]:
            reasons.append(judged[1])
    if not any(r.step == "stage" and r.status != "SKIPPED" for r in results):
        statuses.append("INCONCLUSIVE")
        reasons.append("no stage ran: nothing was measured under faults")
    check = (recovery or {}).get("recovery")
    if check:
        statuses.append(check["status"])
        if check["status"] != "PASS":
            reasons.append(f"recovery: {check['reason']}")
    left = (recovery or {}).get("left_never_injected")
    if left:  # a fault that never injected judged nothing, and its object is still there (remove step)
        statuses.append("INCONCLUSIVE")
        reasons.append(f"removal: {left['reason']}")
    status = max(statuses, key=_RANK.__getitem__) if statuses else "INCONCLUSIVE"
    return status, reasons


def _markdown(document: dict[str, Any]) -> str:
    lines = [
        f"# {document['experiment']} {document['version']}: **{document['status']}**",
        "",
        f"Run `{document['run_id']}`, pipeline {document['pipeline']['name']} {document['pipeline']['version']}.",
        "",
        "| step | status | reasons |",
        "|---|---|---|",
    ]
    for step in document["steps"]:
        label = f"stage {step['stage']}%" if step["step"] == "stage" else step["step"]
        lines.append(f"| {label} | {step['status']} | {'; '.join(step['reasons']) or '-'} |")
    if document["reasons"]:
        lines += ["", "## Why", *[f"- {r}" for r in document["reasons"]]]
    return "\n".join(lines) + "\n"


def _html(markdown: str) -> str:
    return f"<!doctype html><meta charset='utf-8'><title>kfchaos report</title><pre>{html.escape(markdown)}</pre>\n"


def conclude(
    *,
    experiment_text: str,
    baseline_text: str,
    experiment_dir: str,
    target: str,
    run_id: str,
    pipeline_name: str,
    pipeline_version: str,
    pipeline_ir_hash: str,
    image: str,
    preflight: str,
    history: str,
    recovery: str,
    markdown_path: str,
    html_path: str,
    audit_path: str,
) -> Outcome:
    run_id = task_run_id(run_id)
    from kfchaos.steps.context import experiment_from_text

    experiment = experiment_from_text(experiment_text)
    results = load_history(history)
    recovery_data = json.loads(recovery) if recovery else None
    status, reasons = overall(results, recovery_data)
    lease = (json.loads(preflight).get("lease") if preflight else None) or {}
    if lease.get("status") == "busy":  # said first: the reason no stage ran
        status, reasons = "INCONCLUSIVE", [lease["reason"], *reasons]
    steps = [json.loads(r.to_json()) for r in results]
    pipeline = {"name": pipeline_name, "version": pipeline_version, "ir_hash": pipeline_ir_hash}
    document: dict[str, Any] = {
        "kind": "kfchaos.RunVerdict",
        "experiment": experiment.metadata.name,
        "version": experiment.metadata.version,
        "run_id": run_id,
        "pipeline": pipeline,
        "status": status,
        "reasons": reasons,
        "steps": steps,
        "fault_windows": run_fault_windows(steps),
        "recovery": recovery_data,
        "lease": lease,
    }
    noted = targetlease.note_verdict(experiment, run_id, target, status)
    if noted:
        lease["note"] = noted
    started = json.loads(preflight).get("started_at") if preflight else None
    baseline_p99 = _baseline_p99(baseline_text)
    if baseline_p99 is not None:
        document["baseline"] = {"latency_p99": baseline_p99, "drift": experiment.spec.slo.p99_drift_max}
    # The report embeds the run's metric series (kfchaos.report.page.DATA_ID): a run folder collected from the
    # pipeline's artifacts takes its metrics.json from there (kfchaos.rundir.kfpimport.embedded_metrics).
    context: dict[str, Any] = {
        "experiment": experiment,
        "metrics": _run_metrics(experiment, started),
        "steps": steps,
        "baseline": _baseline_mapping(baseline_text),
        "run": {"run_id": run_id, "target": target, "commit": os.environ.get(GIT_COMMIT_ENV), "pipeline": pipeline},
    }
    # The OOM evidence bundle (kfchaos.evidence), when the outcome calls for one: into the report, whose
    # embedded data the run folder takes evidence/ from. It never changes `status`.
    now = time.time()
    context["evidence"] = seams.evidence_bundle(
        experiment, status, context["metrics"], (float(started or now), now), _failing_checks(steps)
    )
    rendered = seams.render_report(document, context)
    markdown, page = rendered if rendered else (_markdown(document), _html(_markdown(document)))
    for path, text in ((markdown_path, markdown), (html_path, page)):
        safefile.write_text(path, text)
    record = audit.build_record(
        run_id=run_id,
        pipeline=pipeline,
        image=image,
        git_commit=os.environ.get(GIT_COMMIT_ENV, "unknown"),
        parameters={
            "experiment": experiment_text,
            "baseline": baseline_text,
            "experiment_dir": experiment_dir,
            "target": target,
        },
        steps=steps,
        recovery=recovery_data,
        verdict={"status": status, "reasons": reasons},
        started_at=started,
        finished_at=time.time(),
    )
    audit.write_record(record, audit_path)
    figures = {
        "stages_run": float(sum(1 for r in results if r.step == "stage" and r.status != "SKIPPED")),
        "verdict_pass": 1.0 if status == "PASS" else 0.0,
        "verdict_fail": 1.0 if status == "FAIL" else 0.0,
    }
    return Outcome(status, figures, document)
