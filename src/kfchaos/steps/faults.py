"""Inject, remove + recover, cleanup: the steps that create and delete chaos objects.

Every object carries the run id as a label (kfchaos.faults.naming), so removal and the exit handler's cleanup
work by label and cannot miss an object whose creation response was lost.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.steps import seams
from kfchaos.steps.context import experiment_from_text
from kfchaos.steps.results import Status, StepResult, describe, load_history
from kfchaos.steps.setup import load_optional_baseline


def inject(experiment_text: str, run_id: str) -> str:
    """Apply every cluster-side fault and wait until each is verifiably injected. Unverified -> stop."""
    experiment = experiment_from_text(experiment_text)
    faults = seams.cluster_faults(experiment)
    if not faults:
        detail = {"chaos_objects": [], "note": "no cluster-side faults (traffic-side faults run in the replay)"}
        return StepResult("inject", 0, "PASS", True, [], detail).to_json()
    manifests = seams.render_faults(experiment, run_id)
    backend = seams.fault_backend(experiment, run_id)
    applied: list[dict[str, Any]] = []
    reasons: list[str] = []
    for fault in faults:
        manifest = manifests[fault.name]
        applied_at = time.time()
        handle = backend.apply(fault)
        try:
            injected = backend.wait_injected(handle)
        except KfchaosError as exc:  # not verified: the run is INCONCLUSIVE, and removal still happens
            injected, ok = {"injected": False, "error": str(exc)}, False
        else:
            ok = bool(injected.get("injected", True)) if isinstance(injected, dict) else bool(injected)
        applied.append(
            {
                "fault": fault.name,
                "kind": manifest["kind"],
                "namespace": manifest["metadata"].get("namespace"),
                "name": manifest["metadata"]["name"],
                "manifest": manifest,
                "handle": describe(handle),
                "handle_object": handle,
                "applied_at": applied_at,
                "injected_at": time.time(),
                "injection": describe(injected),
            }
        )
        if not ok:
            reasons.append(f"{fault.name} ({manifest['kind']}) not verified as injected")
    events = describe(getattr(backend, "events", []))
    for entry in applied:
        # Each object's own API calls, and the cluster's Events about it where the backend can read them.
        entry["api_events"] = [e for e in events if isinstance(e, dict) and e.get("name") == entry["name"]]
        object_events = getattr(backend, "object_events", None)
        if object_events is not None and entry["handle_object"] is not None:
            try:
                entry["events"] = describe(object_events(entry["handle_object"]))
            except KfchaosError as exc:
                entry["events"] = [f"events unavailable: {exc}"]
        del entry["handle_object"]
    status: Status = "PASS" if not reasons else "INCONCLUSIVE"
    outcome: dict[str, Any] = {"chaos_objects": applied, "events": events}
    return StepResult("inject", 0, status, not reasons, reasons, outcome).to_json()


def remove_and_recover(
    experiment_text: str, experiment_dir: str, target: str, run_id: str, history: str, baseline_path: str = ""
) -> str:
    """Delete the run's faults, wait until recovered, then probe the target to measure time until SLOs hold."""
    from kfchaos.verdict import load_requests
    from kfchaos.verdict.recovery import recovery_check

    experiment = experiment_from_text(experiment_text)
    results = load_history(history)
    injected = any(r.step == "inject" and r.detail.get("chaos_objects") for r in results)
    if not injected:
        return json.dumps({"removed": [], "recovery": None, "note": "nothing was injected"}, sort_keys=True)
    backend = seams.fault_backend(experiment, run_id)
    removed = describe(backend.sweep(run_id))
    removed_at = time.time()
    slo = experiment.spec.slo
    probe = min(slo.recovery_max or 60.0, experiment.spec.traffic.stage_duration)
    stage = experiment.spec.traffic.stages[0]
    with tempfile.TemporaryDirectory(prefix="kfchaos-recovery-") as tmp:
        records = str(Path(tmp) / "recovery.parquet")
        summary = seams.replay_stage(
            experiment, stage, experiment_dir, target, records, duration=probe, fault_active=False
        )
        requests = load_requests(records)
    baseline = load_optional_baseline(baseline_path) if baseline_path else None
    base_p99 = baseline.p99("latency_p99") if baseline else None
    check = recovery_check(requests, slo, base_p99, removed_at=removed_at)
    return json.dumps(
        {
            "removed": removed,
            "removed_at": removed_at,
            "probe": summary,
            "recovery": check.to_dict() if check else None,
        },
        sort_keys=True,
        default=str,
    )


def cleanup(experiment_text: str, run_id: str, record_path: str) -> str:
    """The exit handler: remove every object labelled with the run id, whatever happened before."""
    experiment = experiment_from_text(experiment_text)
    record: dict[str, Any] = {"run_id": run_id, "started_at": time.time()}
    if seams.cluster_faults(experiment):
        record["swept"] = describe(seams.fault_backend(experiment, run_id).sweep(run_id))
    else:
        record["swept"] = []
    record["finished_at"] = time.time()
    Path(record_path).parent.mkdir(parents=True, exist_ok=True)
    Path(record_path).write_text(json.dumps(record, sort_keys=True, default=str))
    return json.dumps(record, sort_keys=True, default=str)
