"""`evaluate()`: per-request records + baseline + the experiment's SLOs and abort rules -> a Verdict.

Missing or insufficient data never passes: each check says INCONCLUSIVE with the reason. A stage is the
worst of its checks (FAIL > INCONCLUSIVE > PASS); the experiment is the worst of its stages and its
experiment-wide checks (faults verified, metrics source reachable, recovery time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kfchaos.baseline import Baseline
from kfchaos.faults.activity import MAX_UNCOVERED_SHARE, FaultActivity, coverage
from kfchaos.metrics import oom
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.spec import Experiment, Slo
from kfchaos.verdict import drift
from kfchaos.verdict.abortstorm import abort_recovery_check
from kfchaos.verdict.checks import drift_check, oom_check, rate_check, tail_check
from kfchaos.verdict.clock import metrics_window_check
from kfchaos.verdict.delivery import fault_requests_check
from kfchaos.verdict.foreignload import foreign_load_check
from kfchaos.verdict.gate import gate
from kfchaos.verdict.load import load_check, ramp_rates
from kfchaos.verdict.model import Check, GateResult, StageResult, Status, Verdict, status_of, worst
from kfchaos.verdict.recovery import RECOVERY_WINDOW, recorded_check, recovery_check, within_valid_replay
from kfchaos.verdict.requests import DROPPED, Requests, load_requests

FaultsVerified = bool | Mapping[str, bool] | None
# Besides the abort rules (abort.*), the checks that decide whether the ramp may go on after a stage: a fault not
# seen working stops the ramp. The load check is not one: a short probe or a stage of a few hundred recorded
# requests misses its planned span by chance, and the stage it judges is INCONCLUSIVE at the end anyway.
GATE_CHECKS = ("replay", "fault_active", "fault_requests")


def _tail_sample(requests: Requests, column: np.ndarray) -> tuple[np.ndarray, int]:
    """Finite values of successful requests (never an error's or a refusal's), and how many timeouts count as
    beyond any limit."""
    ok = requests.succeeded() & np.isfinite(column)
    return column[ok], int(np.count_nonzero(requests.timed_out()))


def _oom(
    requests: Requests, window: tuple[float, float], metrics: MetricsSnapshot | None, slo: Slo, served: int
) -> Check:
    if metrics is None:
        return oom_check(
            None, "no metrics given: OOM kills unknown (pass --metrics)", served, slo.oom_kill_rate_max, slo.confidence
        )
    counted = oom.count(metrics, window[0], window[1], metrics.grace)
    if counted.host is None and counted.cadvisor is None:
        return oom_check(None, counted.missing, served, slo.oom_kill_rate_max, slo.confidence)
    return oom_check(counted, None, served, slo.oom_kill_rate_max, slo.confidence, oom.node_shapes(metrics))


def stage_checks(
    requests: Requests,
    experiment: Experiment,
    baseline: Baseline | None,
    metrics: MetricsSnapshot | None,
    replay_valid: bool | str | None,
    stage: int,
    fault_activity: Sequence[FaultActivity] | None = None,
    planned_faults: Sequence[str] = (),
) -> tuple[list[Check], tuple[float, float]]:
    """The stage's checks (the gate's first, see `gate_of`) and its window: first intended send to last
    response."""
    slo = experiment.spec.slo
    samples, confidence = slo.min_samples, slo.confidence
    counted = requests.counted()  # the one denominator (docs/verdict.md, "Accounting")
    served = int(np.count_nonzero(counted))
    unknown = int(np.count_nonzero(requests.unknown()))
    finished = np.where(np.isfinite(requests.latency), requests.sent + requests.latency, requests.intended)
    window = (float(requests.intended.min()), float(np.nanmax(finished)))

    stage_gate = gate(
        requests,
        experiment.spec.abort,
        metrics=metrics,
        max_send_lag_p99=experiment.spec.traffic.max_send_lag_p99,
        replay_valid=replay_valid,
        stage=stage,
        stages=len(experiment.spec.traffic.stages),
        confidence=confidence,
    )
    checks = list(stage_gate.checks)
    checks += coverage_checks(fault_activity, window, planned_faults, stage)
    latency, beyond = _tail_sample(requests, requests.latency)
    # A request cut in flight waited at least this long for its answer (docs/verdict.md, "Requests cut in flight").
    latency_floors = requests.latency_floor()
    checks.append(
        drift_check(
            "p99_drift",
            latency,
            beyond,
            drift.reference(baseline, stage, slo.p99_drift_max, slo.confidence),
            slo.p99_drift_max,
            what="latency",
            min_samples=samples,
            confidence=confidence,
            floors=latency_floors,
        )
    )
    if slo.p99_max is not None:
        checks.append(
            tail_check(
                "p99",
                latency,
                beyond,
                slo.p99_max,
                what="latency",
                min_samples=samples,
                confidence=confidence,
                floors=latency_floors,
            )
        )
    accounting = _accounting(requests)
    error_rate = rate_check(
        "error_rate",
        int(np.count_nonzero(requests.failed())),
        served,
        slo.error_rate_max,
        min_samples=samples,
        confidence=confidence,
        unknown=unknown,
        details=accounting,
    )
    kinds = requests.failed_by_kind()
    if kinds:  # what the failures were, in the reason the report shows
        error_rate = replace(error_rate, reason=f"{error_rate.reason}; {failed_words(kinds)}")
    checks.append(error_rate)
    checks.append(
        rate_check(
            "timeout_rate",
            int(np.count_nonzero(requests.timed_out())),
            served,
            slo.timeout_rate_max,
            min_samples=samples,
            confidence=confidence,
            unknown=unknown,
        )
    )
    checks.append(completions_check(requests))
    checks.append(_oom(requests, window, metrics, slo, served))
    for name, limit, column, what in (
        ("ttft_p99", slo.ttft_p99_max, requests.ttft, "time to first token"),
        # The p99 over requests of each request's own p99 gap (near each request's worst gap), compared with
        # spec.slo.itl_p99_max: not the pooled ITL p99 of vLLM bench or the catalog's `itl_p99` (issue 11 §5).
        ("itl_request_p99", slo.itl_p99_max, requests.itl_p99, "per-request p99 inter-token latency"),
        ("tpot_p99", slo.tpot_p99_max, requests.tpot, "time per output token"),
    ):
        if limit is None:
            continue
        values, timeouts = _tail_sample(requests, column)
        # A timeout is beyond any TTFT limit, and a request cut before its first token waited at least that long
        # for it. ITL and TPOT of a request that never finished are unknown: the wait bounds neither (the tokens
        # still to come may be quick ones), so their floor is 0.
        extra = timeouts if name == "ttft_p99" else 0
        floors = requests.ttft_floor() if name == "ttft_p99" else np.zeros(unknown)
        checks.append(
            tail_check(name, values, extra, limit, what=what, min_samples=samples, confidence=confidence, floors=floors)
        )
    return checks, window


def _accounting(requests: Requests) -> dict[str, object]:
    """Where every request of the stage went (docs/verdict.md, "Accounting"): the error_rate check's details."""
    dropped = requests.failed() & (requests.error == DROPPED)
    return {
        "scheduled": len(requests),
        "counted": int(np.count_nonzero(requests.counted())),
        "succeeded": int(np.count_nonzero(requests.succeeded())),
        "failed": int(np.count_nonzero(requests.failed())),
        "dropped": int(np.count_nonzero(dropped)),
        "timed_out": int(np.count_nonzero(requests.timed_out())),
        "unknown": int(np.count_nonzero(requests.unknown())),
        "cut_in_flight": int(np.count_nonzero(np.isfinite(requests.cut_waited()))),
        "cut_in_flight_longest": _longest_cut(requests),
        "excluded": int(np.count_nonzero(requests.excluded())),
        "excluded_statuses": list(requests.excluded_statuses),
        "failed_by_kind": requests.failed_by_kind(),
        "finish_reasons": requests.finish_reasons(),
    }


# How many of the requests cut in flight the accounting names, longest wait first: enough to find them in the records.
CUT_NAMED = 10


def _longest_cut(requests: Requests) -> list[dict[str, float]]:
    """The requests cut in flight that had waited longest, named by their send time (epoch s, the records' `sent`)
    and their wait: [{"sent": ..., "waited_s": ...}, ...], at most CUT_NAMED."""
    waited = requests.cut_waited()
    cut = np.flatnonzero(np.isfinite(waited))
    longest = cut[np.argsort(-waited[cut], kind="stable")[:CUT_NAMED]]
    return [{"sent": float(requests.sent[i]), "waited_s": float(waited[i])} for i in longest]


# What each kind of failed request was, in the words an SRE reads in the report (docs/verdict.md).
KIND_WORDS = {
    "dropped": "dropped at the replayer's concurrency limit",
    "connect": "no connection",
    "http": "5xx answers",
    "protocol": "malformed answers",
    "empty_completion": "streams that served no token",
    "redirect": "redirects (3xx), not followed: not the answer asked for",
    "empty_body": "2xx answers with an empty body",
    "stream_error": "streams that carried an error event",
    "finish_abort": 'streams ended with finish_reason "abort"',
    "finish_error": 'streams ended with finish_reason "error"',
    "wrong_model": "answers from another model than the one asked for (a fallback's, not the target's)",
}


def failed_words(failed: Mapping[str, int]) -> str:
    """ "failed: 60 redirects (3xx), not followed: ..., 2 streams that carried an error event"."""
    return "failed: " + ", ".join(f"{n} {KIND_WORDS.get(k, k)}" for k, n in failed.items())


def completions_check(requests: Requests) -> Check:
    """For information: how the stage's requests completed, and how the others failed (their kinds). A completion
    is a 2xx answer that completed; finish_reason "length" (capped at max_tokens or max_model_len) is one, shown
    because it is not the model's own stop."""
    ok = int(np.count_nonzero(requests.succeeded()))
    finish = requests.finish_reasons()
    failed = requests.failed_by_kind()
    reason = f"{ok} completed"
    if finish:
        named = ", ".join(f"{n} {r}" for r, n in finish.items())
        reason += f" ({named})"
        if finish.get("length"):
            reason += (
                f"; {finish['length']} stopped at their length limit (max_tokens or max_model_len): completions, "
                "not errors"
            )
    if failed:
        reason += f"; {failed_words(failed)}"
    counted = int(np.count_nonzero(requests.counted()))
    answered_by = requests.answered_by()
    other = failed.get("wrong_model", 0)
    if other:
        named = ", ".join(f"{model} {n}" for model, n in answered_by.items())
        reason += (
            f"; {other} of {counted} ({100 * other / counted:.3g}%) answered by another model (answers named: {named})"
        )
    return Check(
        "completions",
        Status.PASS,
        reason,
        ok / counted if counted else None,
        samples=counted,
        unit="fraction",
        gating=False,
        details={"completed": ok, "finish_reasons": finish, "failed_by_kind": failed, "answered_by": answered_by},
    )


def coverage_checks(
    activities: Sequence[FaultActivity] | None,
    window: tuple[float, float],
    planned: Sequence[str] = (),
    stage: int | None = None,
) -> list[Check]:
    """One `fault_active` check per fault of the stage: every (fault, planned stage) pair is either verified
    to cover the stage or the stage is INCONCLUSIVE, naming the fault and the stage.

    A fault observed in the stage counts only if it was verified active over nearly all of the stage's window
    (kfchaos.faults.activity: MAX_UNCOVERED_SHARE); otherwise INCONCLUSIVE, naming the seconds it was not seen
    active. A fault in `planned` (the experiment puts it under this stage) with no observation at all -- the
    run state holds none for it, or there is no run state (records judged by hand) -- was never seen working
    in the stage: INCONCLUSIVE too, never a stage judged as if under fault."""
    checks = []
    length = max(0.0, window[1] - window[0])
    observed = {activity.fault for activity in activities or ()}
    for fault in planned:
        if fault in observed:
            continue
        source = (
            "no fault activity was recorded for the stage: no run state, or records judged by hand"
            if activities is None
            else "the run state holds no observation of it"
        )
        checks.append(
            Check(
                "fault_active",
                Status.INCONCLUSIVE,
                f"{fault} is planned for stage {stage}% but was never observed active in it ({source}): the "
                "stage cannot count as under that fault",
                0.0,
                1.0 - MAX_UNCOVERED_SHARE,
                samples=0,
                unit="fraction",
                details={"fault": fault, "stage": stage, "window": list(window), "verified": []},
            )
        )
    for activity in activities or ():
        seen = coverage(activity, window)
        details = {
            "fault": activity.fault,
            "window": list(window),
            "verified": [list(w) for w in activity.verified],
            "uncovered_s": seen.uncovered,
        }
        if seen.ok:
            reason = f"{activity.fault} verified active for {seen.covered:.1f}s of the {length:.1f}s replay"
            status = Status.PASS
        else:
            reason = (
                f"{activity.fault} not verified active for {seen.uncovered:.1f}s of the {length:.1f}s replay "
                f"({100 * seen.share_uncovered:.0f}% uncovered; at most {100 * MAX_UNCOVERED_SHARE:g}% allowed)"
            )
            if activity.errors:
                reason += f"; last error: {activity.errors[-1]}"
            status = Status.INCONCLUSIVE
        checks.append(
            Check(
                "fault_active",
                status,
                reason,
                1.0 - seen.share_uncovered,
                1.0 - MAX_UNCOVERED_SHARE,
                samples=len(activity.observations),
                unit="fraction",
                details=details,
            )
        )
    return checks


def gate_of(stage: int, checks: Sequence[Check]) -> GateResult:
    """The stage gate from a stage's checks: the abort rules, replay fidelity and fault coverage."""
    picked = [c for c in checks if c.name.startswith("abort.") or c.name in GATE_CHECKS]
    return GateResult(stage, status_of(picked), picked)


def ramp_consistency(stages: list[StageResult], gates: Mapping[int, GateResult]) -> list[StageResult]:
    """The ramp stops at the first stage whose gate does not clear it (`proceed`): a later stage with records ran
    past a stopped gate. Such a stage is not judged as the ramp meant it: after a tripped gate (an abort rule
    FAILed: users were being hurt) it FAILs with a `ramp` check, after a blind one (INCONCLUSIVE: the gate could
    not tell) it is INCONCLUSIVE; never PASS."""
    stopped: GateResult | None = None
    out = []
    for stage in stages:
        if stopped is not None and stage.requests:
            status = Status.FAIL if stopped.status is Status.FAIL else Status.INCONCLUSIVE
            tripped = "tripped" if status is Status.FAIL else "did not clear"
            check = Check(
                "ramp",
                status,
                f"{stage.requests} records of stage {stage.stage}% come after stage {stopped.stage}%'s gate "
                f"{tripped} the ramp ({'; '.join(stopped.reasons) or stopped.status.value}): the ramp must have "
                "ended there, so these requests were sent past a stopped gate",
                samples=stage.requests,
                details={"stopped_at": stopped.stage, "gate": stopped.to_dict()},
            )
            checks = [*stage.checks, check]
            stage = StageResult(stage.stage, status_of(checks), stage.requests, stage.window, checks, stage.gate)
        gate = gates.get(stage.stage)
        if stopped is None and gate is not None and not gate.proceed:
            stopped = gate
        out.append(stage)
    return out


def faults_check(experiment: Experiment, verified: FaultsVerified) -> Check | None:
    cluster = [f.name for f in experiment.spec.faults if f.cluster_side]
    if not cluster:
        return None
    name = "faults_injected"
    if verified is None:
        return Check(name, Status.INCONCLUSIVE, f"injection of {', '.join(cluster)} not verified (no run state)")
    if isinstance(verified, bool):
        ok = verified
        missing = [] if ok else cluster
    else:
        missing = [n for n in cluster if not verified.get(n, False)]
        ok = not missing
    if ok:
        return Check(name, Status.PASS, f"{', '.join(cluster)} verified injected", samples=len(cluster))
    return Check(name, Status.INCONCLUSIVE, f"not verified as injected: {', '.join(missing)}", samples=len(cluster))


def evaluate(
    records: pa.Table | str | Path | Requests,
    experiment: Experiment,
    *,
    baseline: Baseline | None = None,
    metrics: MetricsSnapshot | None = None,
    faults_verified: FaultsVerified = None,
    stage_valid: Mapping[int, bool | str] | None = None,
    fault_coverage: Mapping[int, Sequence[FaultActivity]] | None = None,
    faults_removed_at: float | None = None,
    recovery_window: float = RECOVERY_WINDOW,
    warnings: Sequence[str] = (),
    recorded_recovery: Mapping[str, Any] | None = None,
) -> Verdict:
    requests = records if isinstance(records, Requests) else load_requests(records)
    spec = experiment.spec
    requests = requests.excluding(spec.slo.excluded_statuses)
    notes = list(warnings)
    if spec.slo.excluded_statuses:
        notes.append(
            f"statuses {', '.join(map(str, spec.slo.excluded_statuses))} excluded by the experiment "
            "(slo.excluded_statuses): neither success nor error, out of every rate and latency sample"
        )
    if baseline is not None:
        notes += [f"baseline: {w}" for w in baseline.warnings]
    planned = list(spec.traffic.stages)
    present = {int(s) for s in np.unique(requests.stage)}
    extra = sorted(present - set(planned))
    if extra:
        notes.append(f"records for unplanned stage(s) {extra} are not stage-checked (recovery may use them)")

    stages: list[StageResult] = []
    ramp_gates: dict[int, GateResult] = {}
    own = requests.was_sent() & ~requests.injected
    per_percent = ramp_rates(experiment, {p: int(np.count_nonzero(own & (requests.stage == p))) for p in planned})
    for percent in planned:
        in_stage = requests.stage == percent
        # Requests a traffic-side fault sent (long-context bursts, ...) are the fault itself; the SLOs judge what
        # they do to the other traffic.
        mask = in_stage & ~requests.injected
        if not mask.any():
            check = Check("records", Status.INCONCLUSIVE, "no records for this stage (not run, or skipped by a gate)")
            stages.append(StageResult(percent, Status.INCONCLUSIVE, 0, None, [check]))
            continue
        subset = requests.where(mask)
        valid = (stage_valid or {}).get(percent)
        activity = None if fault_coverage is None else fault_coverage.get(percent, [])
        # Every fault the experiment puts under this stage that becomes a cluster object must be seen working
        # in it; traffic-side faults are the stage's own requests (fault_requests_check).
        planned_faults = [f.name for f in spec.faults if f.cluster_side and percent in experiment.fault_stages(f)]
        checks, window = stage_checks(subset, experiment, baseline, metrics, valid, percent, activity, planned_faults)
        checks.append(load_check(subset, experiment, percent, baseline, per_percent))
        fault_requests = requests.where(in_stage & requests.injected)  # a few rows: copied once, not the stage
        delivered = fault_requests_check(experiment, percent, fault_requests)
        if delivered is not None:
            checks.append(delivered)
        if any(f.type == "client-abort-storm" and percent in experiment.fault_stages(f) for f in spec.faults):
            checks.append(abort_recovery_check(fault_requests, metrics))
        # The stage's metrics were read over its records' times: they must hold its requests (the fault's too: the
        # server finished those as well).
        window_check = metrics_window_check(requests, in_stage, metrics)
        if window_check is not None:
            checks.append(window_check)
        foreign = foreign_load_check(requests, in_stage, metrics, baseline)
        if foreign is not None:
            checks.append(foreign)
            if foreign.status is not Status.PASS:
                notes.append(f"stage {percent}%: {foreign.name}: {foreign.reason}")
        stage_gate = gate_of(percent, checks)
        ramp_gates[percent] = stage_gate
        stages.append(StageResult(percent, status_of(checks), len(subset), window, checks, stage_gate))
    stages = ramp_consistency(stages, ramp_gates)

    overall: list[Check] = []
    if not len(requests):
        overall.append(Check("records", Status.INCONCLUSIVE, "no request records at all"))
    faults = faults_check(experiment, faults_verified)
    if faults:
        overall.append(faults)
    if metrics is not None and metrics.unreachable:
        overall.append(
            Check(
                "metrics_source",
                Status.INCONCLUSIVE,
                f"{metrics.source or 'metrics'} unreachable: {metrics.unreachable}",
            )
        )
    if baseline is None:
        overall.append(Check("baseline", Status.INCONCLUSIVE, "no baseline: P99 drift cannot be judged"))
    base_p99 = baseline.p99("latency_p99") if baseline else None
    recovery = recovery_check(requests, spec.slo, base_p99, removed_at=faults_removed_at, width=recovery_window)
    recovery = within_valid_replay(recovery, requests, stages)
    after_removal = faults_removed_at is not None and bool(np.any(requests.intended >= faults_removed_at))
    if recorded_recovery is not None and not after_removal:
        # A pipeline run's recovery probe is replayed after the ramp and its records are not part of the run
        # folder: its check, from the run state, stands in (kfchaos.verdict.recovery.recorded_check).
        recovery = recorded_check(dict(recorded_recovery))
    if recovery:
        overall.append(recovery)

    status = worst([s.status for s in stages] + [c.status for c in overall if c.gating])
    return Verdict(
        experiment=experiment.metadata.name,
        version=experiment.metadata.version,
        status=status,
        confidence=spec.slo.confidence,
        stages=stages,
        checks=overall,
        baseline=baseline.summary() if baseline else None,
        warnings=notes,
    )
