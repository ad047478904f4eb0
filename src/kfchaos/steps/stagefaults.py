"""A stage's faults: created when their first stage starts, watched while it replays, removed after their last.

The replay step of every stage runs `under_faults`: faults whose first stage this is are applied and waited
for (Selected + AllInjected); faults applied by an earlier stage are found again by their deterministic
names; every fault alive in this stage is polled through the backend for the whole replay
(kfchaos.faults.activity), and faults whose last stage this is are removed and waited for afterwards. What
was seen goes into the step's output (`fault_windows`), the per-request `fault_active` column is rewritten
from it, and the verdict judges the stage's coverage from it (kfchaos.verdict.evaluate, `fault_coverage`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kfchaos import safefile, termination
from kfchaos.errors import KfchaosError
from kfchaos.faults.activity import FaultActivity, Poller, active_at
from kfchaos.faults.safety import fault_stage_span
from kfchaos.spec import Experiment, FaultBase
from kfchaos.steps import seams
from kfchaos.steps.results import describe
from kfchaos.verdict.requests import injected_mask

# Poll often enough to resolve a stage to ~2 % (MAX_UNCOVERED_SHARE), never more than 5 reads a second
# per fault, never less than one every 2 s.
MIN_POLL, MAX_POLL = 0.2, 2.0
# A step told to stop waits this long for each fault it removed to be seen recovered (its pod has seconds).
STOPPED_RECOVERY_S = 5.0


def poll_interval(stage_duration: float) -> float:
    return min(MAX_POLL, max(MIN_POLL, stage_duration / 50))


def faults_in_stage(experiment: Experiment, stage: int) -> list[FaultBase]:
    """Cluster-side faults alive in `stage`: from their first listed stage through their last."""
    return [f for f in seams.cluster_faults(experiment) if stage in fault_stage_span(experiment, f)]


@dataclass
class StageFaults:
    """The faults alive in one stage, as one task holds them: backend handles, what was created, what was seen."""

    experiment: Experiment
    stage: int
    faults: list[FaultBase]
    backend: Any
    handles: dict[str, Any] = field(default_factory=dict)
    activities: list[FaultActivity] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def watch(self) -> Poller:
        """Poll every fault of the stage while the `with` block runs (one observation before, one after)."""

        def observe(activity: FaultActivity) -> bool:
            return bool(self.backend.is_active(self.handles[activity.fault]))

        return Poller(self.activities, observe, poll_interval(self.experiment.spec.traffic.stage_duration))

    def remove_ending(self) -> None:
        """Remove the faults whose last stage this is, and wait until they are gone."""
        for fault, activity in zip(self.faults, self.activities, strict=True):
            if fault_stage_span(self.experiment, fault)[-1] != self.stage:
                continue
            try:
                self.backend.remove(self.handles[fault.name])
                self.backend.wait_recovered(self.handles[fault.name])
            except KfchaosError as exc:  # the exit handler sweeps it anyway; the next stage's records will show it
                activity.errors.append(f"removal: {exc}")
                self.reasons.append(f"{fault.name} not confirmed removed after stage {self.stage}: {exc}")
            else:
                activity.removed_at = time.time()

    def remove_now(self) -> None:
        """Remove every fault of the stage, whoever created it: the step was told to stop (kfchaos.steps.stopping),
        and no task will watch these faults any more. Every delete is sent before any recovery is waited for (a
        pod may have a second left); a fault not applied yet is a delete of nothing. Runs on its own thread."""
        handles = [(fault, self.handles.get(fault.name) or self.backend.handle_of(fault)) for fault in self.faults]
        for fault, handle in handles:
            try:
                self.backend.remove(handle)
            except Exception as exc:  # a thread of its own: every fault is tried, each failure said
                print(f"kfchaos: removing {fault.name} failed: {exc}", file=sys.stderr)
        for fault, handle in handles:
            if getattr(handle, "one_shot", False):
                continue
            try:
                self.backend.wait_recovered(handle, timeout=STOPPED_RECOVERY_S)
            except Exception as exc:
                print(f"kfchaos: {fault.name} not seen recovered: {exc}", file=sys.stderr)
            else:
                print(f"kfchaos: {fault.name} removed", file=sys.stderr)

    def detail(self) -> dict[str, Any]:
        return {
            "chaos_objects": self.created,
            "fault_windows": [a.to_dict() for a in self.activities],
            "reasons": self.reasons,
        }


def open_stage_faults(
    experiment: Experiment,
    run_id: str,
    stage: int,
    *,
    apply: bool = True,
    applied_at: dict[str, float] | None = None,
    injected_at: dict[str, float] | None = None,
) -> StageFaults | None:
    """The stage's faults, None when it has none. With `apply`, those whose first stage this is are created and
    waited for (Selected + AllInjected); the others are found again by their deterministic names, and
    `applied_at` / `injected_at` (fault name -> epoch) say when another task created them and when the backend
    said they took effect."""
    faults = faults_in_stage(experiment, stage)
    if not faults:
        return None
    held = StageFaults(experiment, stage, faults, seams.fault_backend(experiment, run_id))
    guard = termination.current()
    if guard is not None:  # a step told to stop removes them at once (kfchaos.steps.stopping)
        guard.on_signal(held.remove_now)
    manifests = seams.render_faults(experiment, run_id)
    for fault in faults:
        span = fault_stage_span(experiment, fault)
        manifest = manifests[fault.name]
        applied: float | None = (applied_at or {}).get(fault.name)
        injected: float | None = (injected_at or {}).get(fault.name)
        if apply and span[0] == stage:
            applied = time.time()
            handle = held.backend.apply(fault)
            entry, ok = _wait_injected(held.backend, fault, manifest, handle, applied)
            held.created.append(entry)
            injected = entry["injected_at"]
            if not ok:  # with the backend's own words (e.g. Chaos Mesh's failed Apply) where it gave any
                error = entry["injection"].get("error") if isinstance(entry["injection"], dict) else None
                said = f": {error}" if error else ""
                held.reasons.append(f"{fault.name} ({manifest['kind']}) not verified as injected{said}")
        else:
            handle = held.backend.handle_of(fault)
        held.handles[fault.name] = handle
        held.activities.append(
            FaultActivity(
                fault.name, manifest["metadata"]["name"], manifest["kind"], span, applied, injected_at=injected
            )
        )
    _attach_events(held.backend, held.created)
    return held


def under_faults(
    experiment: Experiment,
    run_id: str,
    stage: int,
    replay: Callable[[], dict[str, Any]],
    target: str = "",
    churn: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `replay` (returns its summary) with this stage's faults applied, watched and removed as the file
    says, and the target watched for foreign interference while it replays (kfchaos.faults.foreign). Returns
    (summary, faults detail: chaos_objects created here, fault_windows, reasons, the LoRA churn's calls as
    fault_actions, and `interference`: what acted on the target that this run did not). `churn`: run this
    stage's lora-adapter-churn faults here (shard 0 only, so a sharded stage churns once); they load, swap and
    unload adapters at `target` beside the replay."""
    watch, notes = stage_foreign_watch(experiment, run_id, stage)
    if watch is not None:
        unwatched = replay

        def replay() -> dict[str, Any]:
            with watch.watching():
                return unwatched()

    summary, detail = _under_churn(experiment, run_id, stage, replay, target, churn)
    if watch is not None:
        detail["interference"] = watch.reasons()
        notes += watch.notes
    detail["interference_notes"] = notes
    return summary, detail


def stage_foreign_watch(experiment: Experiment, run_id: str, stage: int) -> tuple[Any | None, list[str]]:
    """The stage's watch for foreign interference (kfchaos.faults.foreign), over the stage's own faults; none, with
    a note, where it cannot be made."""
    own = [m for name, m in seams.render_faults(experiment, run_id).items()
           if any(f.name == name for f in faults_in_stage(experiment, stage))]  # fmt: skip
    try:
        return seams.foreign_watch(experiment, run_id, stage, own), []
    except KfchaosError as exc:
        return None, [f"foreign interference not checked: {exc}"]


def _under_churn(
    experiment: Experiment,
    run_id: str,
    stage: int,
    replay: Callable[[], dict[str, Any]],
    target: str,
    churn: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    from kfchaos.faults import lorachurn

    churns = (
        lorachurn.stage_churns(experiment, stage, target, lambda f: fault_stage_span(experiment, f)) if churn else []
    )
    if not churns:
        return _under_cluster_faults(experiment, run_id, stage, replay)

    def churned() -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            for item in churns:
                stack.enter_context(item)
            return replay()

    summary, detail = _under_cluster_faults(experiment, run_id, stage, churned)
    detail["fault_windows"] = [*detail["fault_windows"], *(c.activity.to_dict() for c in churns)]
    detail["fault_actions"] = lorachurn.actions_dicts(churns)
    detail["reasons"] = [*detail["reasons"], *(r for c in churns for r in c.reasons)]
    return summary, detail


def _under_cluster_faults(
    experiment: Experiment, run_id: str, stage: int, replay: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    held = open_stage_faults(experiment, run_id, stage)
    if held is None:
        return replay(), {"chaos_objects": [], "fault_windows": [], "reasons": []}
    with held.watch():
        summary = replay()
    held.remove_ending()
    return summary, held.detail()


def _wait_injected(
    backend: Any, fault: FaultBase, manifest: dict[str, Any], handle: Any, applied_at: float
) -> tuple[dict[str, Any], bool]:
    try:
        injected = backend.wait_injected(handle)
    except KfchaosError as exc:  # not verified: the stage's coverage shows it, and removal still happens
        injected, ok = {"injected": False, "error": str(exc)}, False
    else:
        ok = bool(injected.get("injected", True)) if isinstance(injected, dict) else bool(injected)
    verified_at = time.time()
    entry = {
        "fault": fault.name,
        "kind": manifest["kind"],
        "namespace": manifest["metadata"].get("namespace"),
        "name": manifest["metadata"]["name"],
        "manifest": manifest,
        "handle": describe(handle),
        "handle_object": handle,
        "applied_at": applied_at,
        # When the backend says the fault took effect (its own clock; None when it does not say), and when this
        # task saw it verified: the report places the fault's start at the first, never at the poll's time.
        "injected_at": _injected_at(injected) if ok else None,
        "verified_at": verified_at,
        "injection": describe(injected),
    }
    return entry, ok


def _injected_at(injected: Any) -> float | None:
    value = injected.get("injected_at") if isinstance(injected, dict) else getattr(injected, "injected_at", None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _attach_events(backend: Any, created: list[dict[str, Any]]) -> None:
    """Each object's own API calls (before polling began), and the cluster's Events about it where readable."""
    events = describe(list(getattr(backend, "events", [])))
    object_events = getattr(backend, "object_events", None)
    for entry in created:
        entry["api_events"] = [e for e in events if isinstance(e, dict) and e.get("name") == entry["name"]]
        if object_events is not None and entry["handle_object"] is not None:
            try:
                entry["events"] = describe(object_events(entry["handle_object"]))
            except KfchaosError as exc:
                entry["events"] = [f"events unavailable: {exc}"]
        del entry["handle_object"]


def mark_fault_active(records_path: str | Path, windows: Sequence[dict[str, Any]]) -> int:
    """Rewrite the records' `fault_active`: a request was under fault when its send time (its intended time
    when it was never sent) lies in a verified window of any of the stage's faults; burst requests are the
    fault itself and stay marked. Returns how many records are marked. Records kept as parts (a replay whose disk
    failed, kfchaos.traffic.recorder.Spool) are rewritten part by part, each keeping its own metadata."""
    path = Path(records_path)
    spans = [(float(w["from"]), float(w["to"])) for item in windows for w in item.get("verified") or []]
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    return sum(_mark_file(file, spans) for file in files)


def _mark_file(path: Path, spans: list[tuple[float, float]]) -> int:
    table = pq.read_table(path)
    if not table.num_rows:
        return 0
    sent = table.column("sent").to_numpy(zero_copy_only=False).astype(np.float64)
    intended = table.column("intended").to_numpy(zero_copy_only=False).astype(np.float64)
    at = np.where(np.isfinite(sent), sent, intended)
    active = active_at(spans, at)
    active |= injected_mask(table)  # requests a traffic-side fault sent are the fault itself
    index = table.column_names.index("fault_active")
    table = table.set_column(index, table.schema.field(index), pa.array(active, pa.bool_()))
    safefile.replace_with(path, lambda handle: pq.write_table(table, handle), private=True)
    return int(active.sum())
