"""Preflight and baseline: the steps before anything touches the target."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfchaos import safefile
from kfchaos.errors import KfchaosError
from kfchaos.steps import seams, targetlease
from kfchaos.steps.context import experiment_from_text, task_run_id
from kfchaos.steps.results import describe

if TYPE_CHECKING:
    from kfchaos.baseline import Baseline


def preflight(experiment_text: str, run_id: str, ramp: str = "") -> str:
    """Spec valid, its stages in this pipeline's ramp, faults render and pass the safety guards, the target's lease
    held (kfchaos.steps.targetlease: queued for, or taken over from a dead holder whose faults are swept), cluster
    checks pass; raises on any problem. A target still busy at the queue's deadline is no error: the output says
    so (`lease`), and no later step sends or injects."""
    run_id = task_run_id(run_id)
    experiment = experiment_from_text(experiment_text)
    if ramp:
        outside = [s for s in experiment.spec.traffic.stages if s not in json.loads(ramp)]
        if outside:
            raise KfchaosError(
                f"spec.traffic.stages {outside} are not stages of this pipeline (ramp {json.loads(ramp)}); "
                "compile the experiment's own pipeline (kfchaos compile) or use stages from the ramp"
            )
    manifests = seams.render_faults(experiment, run_id)  # renders run the safety guards
    lease = targetlease.acquire(experiment, run_id, "")  # before anything reaches the target or its cluster
    out: dict[str, Any] = {
        "experiment": experiment.metadata.name,
        "version": experiment.metadata.version,
        "run_id": run_id,
        "started_at": time.time(),
        "chaos_objects": [f"{m['kind']}/{m['metadata']['name']}" for m in manifests.values()],
        "lease": lease,
    }
    if lease["status"] == "busy":
        out["backend"] = "not checked: the target is busy, this run touches nothing"
        return json.dumps(out, sort_keys=True)
    faults = seams.cluster_faults(experiment)
    notes = seams.fault_backend(experiment, run_id).preflight(faults) if faults else []
    lora = _lora_ready(experiment)
    out["backend"] = describe(notes)
    if lora:
        out["lora"] = lora
    return json.dumps(out, sort_keys=True)


def baseline(experiment_text: str, baseline_text: str, out_path: str) -> str:
    """Write the baseline for later steps; returns its content hash, or '' when there is none.

    No baseline is not an error here: the verdict then reports P99 drift INCONCLUSIVE, never PASS.
    """
    from kfchaos.baseline import load_baseline, scope_problems

    experiment = experiment_from_text(experiment_text)
    safefile.write_text(out_path, baseline_text)
    if not baseline_text.strip():
        return ""
    loaded, _warnings = load_baseline(out_path)  # checks content_hash: an edited baseline is refused
    problems = scope_problems(loaded, experiment)  # another target's figures: refused before any fault
    if problems:
        raise KfchaosError("the baseline is not this experiment's target's: " + "; ".join(problems))
    return str(loaded.content_hash)


def load_optional_baseline(path: str) -> Baseline | None:
    """The baseline written by `baseline`, or None when the run has none."""
    from kfchaos.baseline import load_baseline

    if not Path(path).is_file() or not Path(path).read_text().strip():
        return None
    return load_baseline(path)[0]


def _lora_ready(experiment: Any) -> str:
    """A lora-adapter-churn fault needs vLLM's runtime LoRA endpoints: a target that refuses them stops the run
    here. The step knows the experiment's endpoint, not a run's --target override: one it cannot reach is a
    note (the stage's own loads then show the fault unverified), never a pass."""
    from kfchaos.faults import lorachurn

    if not lorachurn.churn_faults(experiment):
        return ""
    ready, detail = lorachurn.readiness(experiment)
    if ready is False:
        raise KfchaosError(f"lora-adapter-churn: {detail}")
    return detail if ready else f"not checked: {detail}"
