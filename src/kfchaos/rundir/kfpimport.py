"""A run folder (kfchaos.rundir.layout) from a kfp.local run's artifacts: the pipeline's audit record, its report
(the metrics snapshot and the evidence bundle it embedded) and each stage's records, written as every run folder
is (kfchaos.rundir.writing). The pipeline's verdict and run state are rebuilt here in the documented formats, so
that a re-judgment of the folder sees what the pipeline saw; `kfchaos history` rebuilds a KFP run's verdict the
same way (`verdict_from_pipeline`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from kfchaos.rundir.layout import AUDIT, REPORT_HTML, RunDir, RunDirError, read_json, safe_id
from kfchaos.rundir.writing import write

# Where kfp.local leaves the pipeline's artifacts: <run>/<task>/<output name> (KFP output names cannot hold dots).
PIPELINE_ARTIFACTS = {REPORT_HTML: ("verdict-report", "report_html"), AUDIT: ("verdict-report", "audit")}


def _quiet_reason(step: dict[str, Any]) -> str:
    """The reason shown for a step that gave none: a steady-state probe that proceeded is short by design, so
    its own status is usually INCONCLUSIVE (too few samples) and it is not counted in the verdict."""
    if step.get("step") == "steady_state" and step.get("proceed", True):
        return "proceeded: no gating check failed; the short probe is not counted in the verdict"
    return "ok"


def verdict_from_pipeline(audit: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The pipeline's overall verdict in the documented kfchaos.Verdict format: its stages are the stage
    steps' results; the other steps (steady state, injection, removal) and recovery are experiment-wide checks."""
    steps = audit.get("steps", [])
    experiment = yaml.safe_load(audit.get("parameters", {}).get("experiment", "") or "{}") or {}
    metadata = experiment.get("metadata", {})
    stages = [
        s["detail"]["stage"]
        for s in steps
        if s.get("step") == "stage" and isinstance(s.get("detail"), dict) and isinstance(s["detail"].get("stage"), dict)
    ]
    checks = []
    for step in steps:
        if step.get("step") == "stage":
            continue
        status = step.get("status", "INCONCLUSIVE")
        checks.append(
            {
                "name": step.get("step"),
                "status": status if status in ("PASS", "FAIL", "INCONCLUSIVE") else "INCONCLUSIVE",
                "gating": step.get("step") != "steady_state" or not step.get("proceed", True),
                "value": None,
                "threshold": None,
                "interval": None,
                "samples": 0,
                "unit": "",
                "reason": "; ".join(step.get("reasons", [])) or _quiet_reason(step),
                "details": {},
            }
        )
    recovery = (audit.get("recovery") or {}).get("recovery")
    if isinstance(recovery, dict):
        checks.append(recovery)
    verdict = audit.get("verdict", {})
    return {
        "kind": "kfchaos.Verdict",
        "version": 1,
        "experiment": {"name": metadata.get("name"), "version": metadata.get("version")},
        "status": verdict.get("status", "INCONCLUSIVE"),
        "confidence": None,
        "reasons": list(verdict.get("reasons", [])),
        "warnings": [],
        "baseline": baseline,
        "checks": checks,
        "stages": stages,
        "source": "pipeline",
        **({"fault_windows": audit["fault_windows"]} if audit.get("fault_windows") else {}),
    }


def run_state_from_pipeline(audit: dict[str, Any]) -> dict[str, Any]:
    """run-state.json from the pipeline's step results, so that a re-judgment sees what the pipeline saw."""
    steps = audit.get("steps", [])
    state: dict[str, Any] = {}
    injected = [s for s in steps if s.get("step") == "inject"]
    if injected:
        state["faults_verified"] = all(s.get("status") == "PASS" for s in injected)
    verified = _faults_verified(steps)
    if verified and not injected:
        state["faults_verified"] = verified
    valid: dict[str, Any] = {}
    for step in steps:
        if step.get("step") == "stage" and step.get("status") != "SKIPPED":
            replay = (step.get("detail") or {}).get("replay") or {}
            if "valid" in replay and isinstance(replay["valid"], bool | str):
                valid[str(step.get("stage"))] = replay["valid"]
    if valid:
        state["stage_valid"] = valid
    removed = (audit.get("recovery") or {}).get("removed_at")
    if isinstance(removed, int | float):
        state["faults_removed_at"] = float(removed)
    recovery = (audit.get("recovery") or {}).get("recovery")
    if isinstance(recovery, dict) and recovery.get("status") in ("PASS", "FAIL", "INCONCLUSIVE"):
        state["recovery"] = recovery  # measured on the probe's records, which the folder does not hold
    # The verified fault windows, where this kfchaos's run state reads them (docs/verdict.md, "Fault windows").
    from kfchaos.verdict.runstate import RunState

    if audit.get("fault_windows") and "fault_windows" in RunState.__dataclass_fields__:
        state["fault_windows"] = audit["fault_windows"]
    return state


def _faults_verified(steps: list[dict[str, Any]]) -> dict[str, bool]:
    """Per cluster fault, whether a stage step saw one of its chaos objects injected (the object's `injection`,
    kfchaos.steps.stagefaults: Chaos Mesh's AllInjected condition, or the demo proxy's confirmation): the facts
    the pipeline's stages were judged on, so that re-judging the folder does not call them unverified."""
    out: dict[str, bool] = {}
    for step in steps:
        if step.get("step") != "stage" or not isinstance(step.get("detail"), dict):
            continue
        for obj in step["detail"].get("chaos_objects") or []:
            if not isinstance(obj, dict) or not isinstance(obj.get("fault"), str):
                continue
            injection = obj.get("injection")
            # As the stage step decides (kfchaos.steps.stagefaults._wait_injected): an answer without the flag is ok.
            seen = injection.get("injected", True) is True if isinstance(injection, dict) else injection is True
            out[obj["fault"]] = out.get(obj["fault"], False) or seen
    return out


def _baseline_file(parameters: dict[str, Any]) -> Path | None:
    """Where the run's baseline file lies on this machine (for the control records beside it): the experiment's
    spec.baseline.file, absolute or relative to the experiment file's folder (kfchaos.spec.experiment_relative)."""
    try:
        experiment = yaml.safe_load(parameters.get("experiment", "") or "{}") or {}
    except yaml.YAMLError:
        return None
    name = ((experiment.get("spec") or {}).get("baseline") or {}).get("file") if isinstance(experiment, dict) else None
    if not isinstance(name, str) or not name:
        return None
    folder = Path(str(parameters.get("experiment_dir") or "."))
    candidate = Path(name) if Path(name).is_absolute() else folder / name
    return candidate if candidate.is_file() else None


def _baseline_summary(text: str) -> dict[str, Any] | None:
    """The verdict's `baseline` entry (as `evaluate` gives it) from the baseline text the pipeline ran with."""
    from pydantic import ValidationError

    from kfchaos.baseline import Baseline

    try:
        return Baseline.model_validate(yaml.safe_load(text)).summary()
    except (yaml.YAMLError, ValidationError):
        return None


def embedded_metrics(report_html: str, key: str = "metrics") -> dict[str, Any] | None:
    """The metrics snapshot the pipeline's report embedded (the verdict step fetched it over the whole run), or
    with key="evidence" the OOM evidence bundle it collected."""
    from kfchaos.report.page import DATA_ID

    found = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', report_html, re.S)
    if not found:
        return None
    try:
        data = json.loads(found.group(1))
    except json.JSONDecodeError:
        return None
    metrics = data.get(key) if isinstance(data, dict) else None
    return metrics if isinstance(metrics, dict) else None


def from_local_pipeline(kfp_run_dir: Path, runs_root: Path, *, source: str, run_id: str | None = None) -> RunDir:
    """runs/<run-id>/ from a kfp.local run's outputs (<run>/<task>/<output>): the folder's name is `run_id`, the
    run's own (kfchaos.kfp.runs.LocalOutcome.run_id: its pipeline root's name, time and a random part), else the
    kfp.local run's (the job-id placeholder is a fresh random id per task there, so no task sees one run id)."""
    audit_path = kfp_run_dir.joinpath(*PIPELINE_ARTIFACTS[AUDIT])
    if not audit_path.is_file():
        raise RunDirError(f"{kfp_run_dir}: the run wrote no audit record (it failed before its verdict)")
    audit = read_json(audit_path)
    parameters = audit.get("parameters", {})
    baseline_text = parameters.get("baseline", "") or ""
    baseline = None
    if baseline_text.strip():
        baseline = _baseline_summary(baseline_text)
    baseline_path = _baseline_file(parameters)
    html_path = kfp_run_dir.joinpath(*PIPELINE_ARTIFACTS[REPORT_HTML])
    page = html_path.read_text() if html_path.is_file() else ""
    metrics = embedded_metrics(page) if page else None
    run = audit.get("run", {})
    # One records file per stage: the replay task's, or the merge task's for a sharded stage (kfchaos.steps.shards).
    parts = sorted([*kfp_run_dir.glob("replay-stage*/requests"), *kfp_run_dir.glob("merge-shards*/requests")])
    return write(
        runs_root / safe_id(run_id or kfp_run_dir.name),
        experiment_text=parameters.get("experiment", ""),
        records=[p for p in parts if p.exists()],  # a folder: the parts of a stage its disk cut
        verdict=verdict_from_pipeline(audit, baseline),
        baseline_text=baseline_text,
        baseline_path=baseline_path,
        metrics=metrics,
        run_state=run_state_from_pipeline(audit),
        stages=audit.get("steps", []),
        audit=audit,
        evidence=embedded_metrics(page, "evidence") if page else None,
        info={
            "source": source,
            "target": parameters.get("target"),
            "commit": audit.get("git_commit"),
            "pipeline": audit.get("pipeline"),
            "pipeline_job_id": run.get("id"),
            "started_at": run.get("started_at"),
            "finished_at": run.get("finished_at"),
        },
    )
