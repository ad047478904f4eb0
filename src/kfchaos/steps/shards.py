"""A stage replayed by n parallel shard pods (issue 15 §4): start -> n x replay shard -> merge.

One replay process handles about 5,000 concurrent streams; a fleet needs more. With `spec.traffic.shards` n > 1
the experiment's pipeline runs each stage as three steps, and each part of what the single replay task did has
exactly one owner:

- `start` (one task): creates the faults whose first stage this is and waits until they are injected, then fixes
  one absolute start time, `shard_start_lead` seconds ahead, for every shard; it also fixes the stage's plan hash.
- `replay_shard` (n tasks, a KFP ParallelFor): replays shard i of n (the hash partition of kfchaos.traffic
  .sampling) with offsets counted from that start time. A shard that is ready early waits; one that starts late
  by up to `max_send_lag_p99` sends with that lag (it shows in the records); one later than that sends nothing,
  since catching up would fire a burst the plan does not have, and the merge makes the stage INCONCLUSIVE.
  Shard 0 alone watches the stage's faults (the activity poll), from before the start until the last response
  any shard can still get (start + duration + timeout).
- `merge` (one task): checks that every shard 0..n-1 ran once on the stage's plan, concatenates their records
  (kfchaos.traffic.merge), summarizes them as one stage, marks `fault_active` from shard 0's verified windows,
  and removes the faults whose last stage this is. Its output has the shape of the single replay task's, so the
  metrics step and the gate after it are the same for both shapes.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from kfchaos.faults import lorachurn
from kfchaos.faults.safety import fault_stage_span
from kfchaos.steps import gates, targetlease
from kfchaos.steps.context import experiment_from_text, task_run_id
from kfchaos.steps.stagefaults import (
    StageFaults,
    faults_in_stage,
    mark_fault_active,
    open_stage_faults,
    stage_foreign_watch,
)
from kfchaos.steps.stopping import guarded, replay_stopping

WATCH_MARGIN = 0.5  # seconds past the other shards' last possible response (engine sweep, clock skew of the pods)


@guarded
def start(
    experiment_text: str, experiment_dir: str, run_id: str, stage: int, shards: int, decision: str = gates.CONTINUE
) -> str:
    """Faults in, then the shards' common start time (epoch) and the stage's plan hash, as JSON. After a gate that
    stopped the ramp (`decision`), nothing: the shards and the merge pass the marker on (kfchaos.steps.gates)."""
    from kfchaos.traffic.api import plan_stage
    from kfchaos.traffic.merge import stage_plan_hash

    if gates.gated(decision):
        return json.dumps({"stage": stage, "gated": gates.GATED})
    run_id = task_run_id(run_id)
    experiment = experiment_from_text(experiment_text)
    if stage not in experiment.spec.traffic.stages:
        return json.dumps({"stage": stage, "not_in_ramp": True})
    plan = plan_stage(experiment, stage, base_dir=experiment_dir)  # reads nothing yet: a missing file fails here
    with targetlease.holding(experiment, run_id, "") as lease:
        if lease.lost:  # the shards and the merge pass the marker on, as after a gate that stopped the ramp
            return json.dumps({"stage": stage, "gated": f"the target's lease: {lease.lost}"})
        held = open_stage_faults(experiment, run_id, stage)
    faults = held.detail() if held is not None else {"chaos_objects": [], "fault_windows": [], "reasons": []}
    lead = experiment.spec.traffic.shard_start_lead
    notes = []
    if experiment.spec.traffic.shards != shards:
        notes.append(
            f"the pipeline was compiled for {shards} shards; the experiment asks for {experiment.spec.traffic.shards}"
        )
    out = {
        "stage": stage,
        "shards": shards,
        "start_at": time.time() + lead,  # after the faults are in: no shard sends before they are verified
        "lead": lead,
        "stage_plan_hash": stage_plan_hash(plan.settings),
        "applied_at": {a.fault: a.applied_at for a in held.activities if a.applied_at} if held else {},
        "injected_at": {a.fault: a.injected_at for a in held.activities if a.injected_at} if held else {},
        "faults": {"chaos_objects": faults["chaos_objects"], "reasons": faults["reasons"]},
        "notes": notes,
    }
    return json.dumps(out, sort_keys=True, default=str)


@guarded
def replay_shard(
    experiment_text: str,
    experiment_dir: str,
    target: str,
    run_id: str,
    stage: int,
    shard: int,
    shards: int,
    start_json: str,
    records_path: str,
) -> str:
    """Replay shard `shard` of `shards` from the common start time; write its records; return its summary."""
    run_id = task_run_id(run_id)
    from kfchaos.records import REQUEST_SCHEMA
    from kfchaos.traffic.api import plan_stage
    from kfchaos.traffic.merge import stage_plan_hash
    from kfchaos.traffic.recorder import write_parquet

    begun = json.loads(start_json)
    if begun.get("not_in_ramp") or begun.get("gated"):
        write_parquet(REQUEST_SCHEMA.empty_table(), records_path)
        return json.dumps({"stage": stage, "shard": shard, **_skip_marker(begun)})
    experiment = experiment_from_text(experiment_text)
    start_at = float(begun["start_at"])
    plan = plan_stage(experiment, stage, base_dir=experiment_dir, shard=shard, shards=shards)
    settings = plan.settings
    out: dict[str, Any] = {
        "stage": stage,
        "shard": shard,
        "shards": shards,
        "start_at": start_at,
        "plan_hash": plan.hash,
        "stage_plan_hash": stage_plan_hash(settings),
    }
    late = time.time() - start_at
    out["late_by"] = max(0.0, late)
    with targetlease.holding(experiment, run_id, target) as lease:
        if lease.lost or late > settings.max_send_lag_p99:  # the merge finds its share missing: INCONCLUSIVE
            write_parquet(REQUEST_SCHEMA.empty_table(), records_path)
            out["sent_share"] = False
            if lease.lost:
                out["fault_reasons"] = [f"shard {shard} sent nothing: the target's lease: {lease.lost}"]
            return json.dumps(out, sort_keys=True, default=str)
        return _replay_shard(experiment, target, run_id, stage, shard, plan, begun, records_path, out)


def _replay_shard(
    experiment: Any,
    target: str,
    run_id: str,
    stage: int,
    shard: int,
    plan: Any,
    begun: dict[str, Any],
    records_path: str,
    out: dict[str, Any],
) -> str:
    from kfchaos.traffic.api import run_stage

    settings, start_at = plan.settings, float(begun["start_at"])

    # Shard 0 alone churns LoRA adapters (as it alone watches the faults), so a sharded stage churns once.
    churns = (
        lorachurn.stage_churns(experiment, stage, target, lambda f: fault_stage_span(experiment, f))
        if shard == 0
        else []
    )

    def replay() -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            for churn in churns:
                stack.enter_context(churn)
            endpoint = target or experiment.spec.target.endpoint
            result = replay_stopping(
                lambda signals: run_stage(plan, endpoint, out=records_path, start_at=start_at, signals=signals)
            )
        summary: dict[str, Any] = result.summary.to_dict()
        return summary

    # Shard 0 alone watches the target for foreign interference too (kfchaos.faults.foreign), as it watches the faults.
    watch, notes = stage_foreign_watch(experiment, run_id, stage) if shard == 0 else (None, [])
    if watch is not None:
        unwatched = replay

        def replay() -> dict[str, Any]:
            with watch.watching():
                return unwatched()

    held = open_stage_faults(experiment, run_id, stage, apply=False, **_times(begun)) if shard == 0 else None
    if held is None:
        summary = replay()
    else:
        with held.watch():
            summary = replay()
            # Watch until the stage's last possible response, whichever shard gets it: the verdict judges
            # coverage up to the stage's last response, and a shard waits at most `timeout` (plus its sweep) for
            # the answers to its last sends (kfchaos.traffic.engine).
            _sleep_until(start_at + (settings.duration or 0.0) + settings.timeout + WATCH_MARGIN)
        out["fault_windows"] = held.detail()["fault_windows"]
        out["fault_reasons"] = held.reasons
    if churns:
        out["fault_windows"] = [*(out.get("fault_windows") or []), *(c.activity.to_dict() for c in churns)]
        out["fault_reasons"] = [*(out.get("fault_reasons") or []), *(r for c in churns for r in c.reasons)]
        out["fault_actions"] = lorachurn.actions_dicts(churns)
    if shard == 0:
        out["interference"] = watch.reasons() if watch is not None else []
        out["interference_notes"] = [*notes, *(watch.notes if watch is not None else [])]
    out.update(summary=summary, sent_share=True)
    return json.dumps(out, sort_keys=True, default=str)


def _times(begun: dict[str, Any]) -> dict[str, Any]:
    """When the start task created each fault and when the backend said it took effect."""
    return {"applied_at": begun.get("applied_at"), "injected_at": begun.get("injected_at")}


def _sleep_until(when: float) -> None:
    while (left := when - time.time()) > 0:
        time.sleep(min(left, 1.0))


@guarded
def merge(
    experiment_text: str,
    experiment_dir: str,
    run_id: str,
    stage: int,
    shards: int,
    start_json: str,
    shard_results: list[str],
    parts: list[str],
    records_path: str,
) -> str:
    """The stage's summary (the single replay task's JSON shape) from its shards; faults ending here removed."""
    run_id = task_run_id(run_id)
    begun = json.loads(start_json)
    if begun.get("not_in_ramp") or begun.get("gated"):
        from kfchaos.records import REQUEST_SCHEMA
        from kfchaos.traffic.recorder import write_parquet

        write_parquet(REQUEST_SCHEMA.empty_table(), records_path)
        return json.dumps({"stage": stage, **_skip_marker(begun)})
    experiment = experiment_from_text(experiment_text)
    results = [json.loads(text) for text in shard_results]
    if len(results) != len(parts):
        raise ValueError(f"merge: {len(results)} shard results but {len(parts)} record files")
    try:
        problems = shard_problems(results, shards, begun, experiment.spec.traffic.max_send_lag_p99)
        problems += unfinished_parts(parts)  # the merged file cannot carry a shard's cut: said here
        # KFP collects the results and the record files as two lists: nothing here depends on their order.
        table = _merge_files(parts, records_path)
        results.sort(key=lambda r: int(r.get("shard", -1)))
        summary = _summary(experiment, stage, experiment_dir, table, begun, results)
    finally:
        # Faults ending in this stage go, whatever the merge found (the exit handler would sweep them anyway).
        held = open_stage_faults(experiment, run_id, stage, apply=False, **_times(begun))
        if held is not None:
            held.remove_ending()
    faults = _faults(experiment, stage, begun, results, held)
    faults["marked_requests"] = mark_fault_active(records_path, faults["fault_windows"])
    out = {**summary, "stage": stage, "run_id": run_id, "faults": faults, "replay_reasons": problems}
    return json.dumps(out, sort_keys=True, default=str)


def _skip_marker(begun: dict[str, Any]) -> dict[str, Any]:
    return {"gated": begun["gated"]} if begun.get("gated") else {"not_in_ramp": True}


def shard_problems(results: list[dict[str, Any]], shards: int, begun: dict[str, Any], tolerance: float) -> list[str]:
    """Why the shards' records do not make up the stage's plan (each reason makes the stage INCONCLUSIVE)."""
    problems = []
    seen: dict[int, int] = {}
    for item in results:
        index = int(item.get("shard", -1))
        seen[index] = seen.get(index, 0) + 1
        if item.get("stage_plan_hash") != begun.get("stage_plan_hash"):
            problems.append(f"shard {index}/{shards} planned another stage (plan hash {item.get('stage_plan_hash')})")
        if not item.get("sent_share"):
            problems.append(
                f"shard {index}/{shards} started {item.get('late_by', 0.0):.3f}s after the stage's start time (at "
                f"most {tolerance:g}s): its share of the plan was not sent; raise traffic.shard_start_lead"
            )
    missing = sorted(set(range(shards)) - set(seen))
    if missing:
        problems.append(f"shards {missing} of {shards} left no results: the stage's plan was not sent in full")
    twice = sorted(index for index, count in seen.items() if count > 1 or not 0 <= index < shards)
    if twice:
        problems.append(f"shard indices {twice} ran more than once or are not in 0..{shards - 1}")
    return problems


def unfinished_parts(parts: list[str]) -> list[str]:
    """A shard's records its disk cut, or whose replay never finished (kfchaos.records.unfinished_stages): the
    stage's plan was not sent in full (each reason makes the stage INCONCLUSIVE)."""
    from kfchaos.records import unfinished_stages

    return [f"shard records {Path(part).name}: {why}" for part in parts for why in unfinished_stages(part).values()]


def _merge_files(parts: list[str], records_path: str) -> Any:
    from kfchaos.traffic.merge import merge_records

    return merge_records(parts, records_path)


def _summary(
    experiment: Any, stage: int, experiment_dir: str, table: Any, begun: dict[str, Any], results: list[dict[str, Any]]
) -> dict[str, Any]:
    from kfchaos.traffic.api import plan_stage
    from kfchaos.traffic.summary import combined_stalls, summarize

    settings = plan_stage(experiment, stage, base_dir=experiment_dir).settings
    merged = summarize(
        table,
        stage=stage,
        duration=settings.duration,
        max_send_lag_p99=settings.max_send_lag_p99,
        goodput=settings.goodput,
        streaming=settings.api != "http",
    )
    summary: dict[str, Any] = merged.to_dict()
    # The plan meant is the stage's whole plan: what an unsharded replay records and `audit verify` recomputes.
    summary["plan_hash"] = begun["stage_plan_hash"]
    summary["source"] = next((r["summary"].get("source") for r in results if r.get("summary")), None)
    summary["valid"] = True if merged.valid else (merged.invalid_reason or "replay invalid")
    summary["client_stall"] = combined_stalls([(r.get("summary") or {}).get("client_stall") for r in results])
    summary["sharding"] = {
        "shards": begun["shards"],
        "start_at": begun["start_at"],
        "lead": begun["lead"],
        "per_shard": [_per_shard(r) for r in results],
        "notes": begun.get("notes") or [],
    }
    return summary


def _per_shard(result: dict[str, Any]) -> dict[str, Any]:
    summary = result.get("summary") or {}
    lag = summary.get("send_lag") or {}
    return {
        "shard": result.get("shard"),
        "plan_hash": result.get("plan_hash"),
        "late_by": result.get("late_by"),
        "sent_share": result.get("sent_share"),
        "intended": summary.get("intended"),
        "sent": summary.get("sent"),
        "intended_rate": summary.get("intended_rate"),
        "achieved_rate": summary.get("achieved_rate"),
        "send_lag_p99": lag.get("p99"),
        "valid": summary.get("valid"),
    }


def _faults(
    experiment: Any, stage: int, begun: dict[str, Any], results: list[dict[str, Any]], held: StageFaults | None
) -> dict[str, Any]:
    """The single replay task's `faults` detail: created by start, watched by shard 0, removed by the merge."""
    started = begun.get("faults") or {}
    reasons = list(started.get("reasons") or [])
    watcher = next((r for r in results if int(r.get("shard", -1)) == 0), {})
    windows = [dict(w) for w in watcher.get("fault_windows") or []]
    reasons += list(watcher.get("fault_reasons") or [])
    if faults_in_stage(experiment, stage) and not windows:
        reasons.append("the stage's faults were not watched (shard 0, their watcher, sent nothing): not verified")
    if held is not None:
        reasons += held.reasons
        removed = {a.fault: a for a in held.activities}
        for window in windows:
            activity = removed.get(str(window.get("fault")))
            if activity is not None and (activity.removed_at is not None or activity.errors):
                window["removed_at"] = activity.removed_at
                window["errors"] = (list(window.get("errors") or []) + activity.errors)[-5:]
    detail: dict[str, Any] = {
        "chaos_objects": started.get("chaos_objects") or [],
        "fault_windows": windows,
        "reasons": reasons,
    }
    if watcher.get("fault_actions"):
        detail["fault_actions"] = watcher["fault_actions"]
    # What acted on the target that this run did not (shard 0 watched it): stages.collect makes it INCONCLUSIVE.
    detail["interference"] = list(watcher.get("interference") or [])
    detail["interference_notes"] = list(watcher.get("interference_notes") or [])
    return detail
