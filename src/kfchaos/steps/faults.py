"""Remove + recover, cleanup: the steps after the ramp that delete chaos objects (they are created, watched
and removed per stage by kfchaos.steps.stagefaults).

Every object carries the run id as a label (kfchaos.faults.naming), so removal and the exit handler's cleanup
work by label and cannot miss an object whose creation response was lost.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from kfchaos import safefile
from kfchaos.faults.backend import LeftNeverInjected
from kfchaos.steps import seams, targetlease
from kfchaos.steps.context import experiment_from_text, task_run_id
from kfchaos.steps.results import describe, load_history
from kfchaos.steps.setup import load_optional_baseline
from kfchaos.steps.stopping import guarded


@guarded
def remove_and_recover(
    experiment_text: str, experiment_dir: str, target: str, run_id: str, history: str, baseline_path: str = ""
) -> str:
    """Delete the run's faults, wait until recovered, then probe the target to measure time until SLOs hold."""
    run_id = task_run_id(run_id)
    from kfchaos.verdict import load_requests
    from kfchaos.verdict.recovery import recovery_check

    experiment = experiment_from_text(experiment_text)
    results = load_history(history)
    adapters = _unload_adapters(experiment, target)  # a churned stage killed before its end leaves them loaded
    injected = any(r.detail.get("chaos_objects") for r in results)
    if not injected:
        note = {"removed": [], "recovery": None, "note": "nothing was injected", "lora_adapters": adapters}
        return json.dumps(note, sort_keys=True)
    backend = seams.fault_backend(experiment, run_id)
    left: dict[str, Any] | None = None
    try:
        removed = describe(backend.sweep(run_id))
    except LeftNeverInjected as exc:  # nothing applied is left: still judged (INCONCLUSIVE), the objects named
        removed, left = [], {"objects": exc.objects, "release": exc.commands, "reason": exc.reason}
    # Faults are removed after their last stage; recovery runs from the last confirmed removal, or from now
    # when the sweep still found one (or a removal was not confirmed).
    last_seen = {w.get("fault"): w for r in results for w in r.detail.get("fault_windows") or [] if isinstance(w, dict)}
    confirmed = [w["removed_at"] for w in last_seen.values() if isinstance(w.get("removed_at"), int | float)]
    removed_at = time.time()
    if not removed and confirmed and len(confirmed) == len(last_seen):
        removed_at = float(max(confirmed))
    slo = experiment.spec.slo
    probe = min(slo.recovery_max or 60.0, experiment.spec.traffic.stage_duration)
    stage = experiment.spec.traffic.stages[0]
    with (
        targetlease.holding(experiment, run_id, target) as lease,
        tempfile.TemporaryDirectory(prefix="kfchaos-recovery-") as tmp,
    ):
        if lease.lost:  # the faults are removed (above); the target is no longer this run's to probe
            unprobed = {"status": "INCONCLUSIVE", "reason": f"recovery not probed: the target's lease: {lease.lost}"}
            out = {
                "removed": removed,
                "removed_at": removed_at,
                "recovery": unprobed,
                "lora_adapters": adapters,
                "left_never_injected": left,
            }
            return json.dumps(out, sort_keys=True, default=str)
        records = str(Path(tmp) / "recovery.parquet")
        summary = seams.replay_stage(
            experiment, stage, experiment_dir, target, records, duration=probe, fault_active=False
        )
        requests = load_requests(records).excluding(slo.excluded_statuses)  # the verdict's accounting
    baseline = load_optional_baseline(baseline_path) if baseline_path else None
    base_p99 = baseline.p99("latency_p99") if baseline else None
    check = recovery_check(requests, slo, base_p99, removed_at=removed_at)
    return json.dumps(
        {
            "removed": removed,
            "removed_at": removed_at,
            "probe": summary,
            "recovery": check.to_dict() if check else None,
            "lora_adapters": adapters,
            "left_never_injected": left,
        },
        sort_keys=True,
        default=str,
    )


def cleanup(experiment_text: str, run_id: str, record_path: str) -> str:
    """The exit handler: remove every object labelled with the run id, whatever happened before, then give the
    target's lease back (kfchaos.steps.targetlease)."""
    run_id = task_run_id(run_id)
    experiment = experiment_from_text(experiment_text)
    record: dict[str, Any] = {"run_id": run_id, "started_at": time.time()}
    if seams.cluster_faults(experiment):
        record["swept"] = describe(seams.fault_backend(experiment, run_id).sweep(run_id))
    else:
        record["swept"] = []
    # The exit handler has the experiment's endpoint (not the run's --target) and the credential only where the
    # task has it: a best effort after the stage's own unload and the remove step's (kfchaos.faults.lorachurn).
    record["lora_adapters"] = _unload_adapters(experiment, "")
    record["lease"] = targetlease.release(experiment, run_id, "")  # last: the target is clean before it is given back
    record["finished_at"] = time.time()
    safefile.write_text(record_path, json.dumps(record, sort_keys=True, default=str))
    return json.dumps(record, sort_keys=True, default=str)


def _unload_adapters(experiment: Any, target: str) -> list[dict[str, Any]] | str:
    """Unload the adapters of the experiment's lora-adapter-churn faults still loaded at the target (what was
    done, or why it could not be); nothing at all when it has none."""
    from kfchaos.errors import KfchaosError
    from kfchaos.faults import lorachurn

    if not lorachurn.churn_faults(experiment):
        return []
    try:
        return lorachurn.sweep(experiment, lorachurn.LoraClient.for_experiment(experiment, target))
    except KfchaosError as exc:
        return f"not checked: {exc}"
