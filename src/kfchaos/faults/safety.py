"""Safety guards applied to every fault right before it is rendered, and so before anything is sent.

kfchaos.spec enforces the same rules while loading a file; they are checked again here because an
`Experiment` can also be built in code (a pipeline component, a test), and a guard that can be skipped
is no guard. Each refusal is a `FaultSafetyError` naming the rule and the field.
"""

from __future__ import annotations

from kfchaos.errors import KfchaosError, Path, SafetyError
from kfchaos.faultspec.admission import mode_value_problem, pods_hit
from kfchaos.faultspec.params import ClientAbortStormParams, TargetSelector
from kfchaos.spec import Experiment, FaultBase

RULE_PROTECTED_NAMESPACE = "protected-namespace"
RULE_EMPTY_SELECTOR = "empty-selector"
RULE_MODE_VALUE = "mode-value"
RULE_MAX_POD_PERCENT = "max-pod-percent"
RULE_MAX_FAULT_DURATION = "max-fault-duration"


class FaultSafetyError(SafetyError):
    """A refusal that knows which field of the experiment caused it, so the CLI can name FILE:LINE."""

    def __init__(self, rule: str, message: str, path: Path) -> None:
        self.path = path
        super().__init__(rule, message)


class FaultInputError(KfchaosError):
    """A fault the cluster would reject (not a safety matter), with the field to fix."""

    def __init__(self, message: str, path: Path) -> None:
        self.path = path
        super().__init__(message)


def fault_path(experiment: Experiment, fault: FaultBase) -> Path:
    for index, candidate in enumerate(experiment.spec.faults):
        if candidate is fault or candidate == fault:
            return ("spec", "faults", index)
    return ("spec", "faults", fault.name)


def check_fault(experiment: Experiment, fault: FaultBase) -> None:
    """Raise FaultSafetyError on the first rule `fault` breaks."""
    safety = experiment.spec.safety
    protected = set(safety.protected_namespaces)
    base = fault_path(experiment, fault)

    namespaces: list[tuple[str, Path]] = [
        (experiment.spec.target.namespace, ("spec", "target", "namespace")),
        (experiment.fault_namespace(fault), (*base, "namespace")),
    ]
    other_side = getattr(getattr(fault, "params", None), "target", None)
    if not isinstance(other_side, TargetSelector):  # HTTP faults use `target` for Request/Response
        other_side = None
    if other_side is not None:
        namespaces.append((other_side.namespace, (*base, "params", "target", "namespace")))
    for namespace, path in namespaces:
        if namespace in protected:
            raise FaultSafetyError(
                RULE_PROTECTED_NAMESPACE,
                f"namespace {namespace!r} is in safety.protected_namespaces; chaos is never injected there",
                path,
            )

    selector = experiment.fault_selector(fault)
    if not selector.labels and not selector.expressions:
        raise FaultSafetyError(
            RULE_EMPTY_SELECTOR,
            "the selector is empty and would select every pod in the namespace",
            (*base, "selector"),
        )
    if other_side is not None and not other_side.labels:
        raise FaultSafetyError(
            RULE_EMPTY_SELECTOR,
            "the partition target selector is empty and would cut off every pod in its namespace",
            (*base, "params", "target", "labels"),
        )

    _check_mode(fault, safety.max_pod_percent, base)

    if fault.duration is not None and fault.duration > safety.max_fault_duration:
        raise FaultSafetyError(
            RULE_MAX_FAULT_DURATION,
            f"duration {fault.duration:g}s exceeds safety.max_fault_duration ({safety.max_fault_duration:g}s)",
            (*base, "duration"),
        )
    if fault.duration is not None and fault.duration <= 0:
        raise FaultSafetyError(RULE_MAX_FAULT_DURATION, "duration must be longer than zero", (*base, "duration"))
    params = getattr(fault, "params", None)
    if isinstance(params, ClientAbortStormParams):
        _check_client_abort_storm(experiment, params, base)


def _check_client_abort_storm(experiment: Experiment, params: ClientAbortStormParams, base: Path) -> None:
    """A storm must be able to do what it says: tokens are counted on a stream, and the request timeout must not
    end the streams before the client closes them."""
    target = experiment.spec.target
    if params.requests and params.abort_after is None and target.api == "http":
        raise FaultInputError(
            "aborting after tokens needs a streaming API (target.api openai-completions or openai-chat); "
            "give abort_after (seconds) for plain HTTP",
            (*base, "params", "abort_after_tokens"),
        )
    if params.requests and params.abort_after is not None and params.abort_after >= target.timeout:
        raise FaultInputError(
            f"abort_after ({params.abort_after:g}s) must be below target.timeout ({target.timeout:g}s), "
            "or the timeout ends the streams before the clients abort them",
            (*base, "params", "abort_after"),
        )


def _check_mode(fault: FaultBase, max_pod_percent: float, base: Path) -> None:
    path = (*base, "value")
    if fault.mode in ("one", "all"):
        if fault.value is not None:
            raise FaultSafetyError(RULE_MODE_VALUE, f"mode {fault.mode} takes no value", path)
        if fault.mode == "all" and max_pod_percent < 1.0:
            raise FaultSafetyError(
                RULE_MAX_POD_PERCENT,
                f"mode all hits every matching pod, above safety.max_pod_percent ({max_pod_percent * 100:g}%)",
                (*base, "mode"),
            )
        return
    problem = mode_value_problem(fault.mode, fault.value)
    if problem:
        raise FaultSafetyError(RULE_MODE_VALUE, problem, path)
    if fault.mode == "fixed":
        return  # a count: checked against the cap once the matching pods are known (check_pod_share)
    if int(fault.value or 0) / 100 > max_pod_percent:
        raise FaultSafetyError(
            RULE_MAX_POD_PERCENT,
            f"value {fault.value}% exceeds safety.max_pod_percent ({max_pod_percent * 100:g}%)",
            path,
        )


def check_pod_share(experiment: Experiment, fault: FaultBase, matching: int) -> None:
    """The cap against the pods that match now: Chaos Mesh rounds percentages up and `fixed` is a count
    (kfchaos.faultspec.admission.pods_hit), so `fixed-percent 50` on 3 replicas hits 2 (67 %)."""
    cap = experiment.spec.safety.max_pod_percent
    _fewest, most = pods_hit(fault.mode, fault.value, matching)
    if matching and most / matching > cap + 1e-9:
        raise FaultSafetyError(
            RULE_MAX_POD_PERCENT,
            f"mode {fault.mode}{' ' + fault.value if fault.value else ''} hits {most} of the {matching} matching "
            f"pods ({most / matching * 100:.0f}%; Chaos Mesh rounds up), above safety.max_pod_percent "
            f"({cap * 100:g}%)",
            (*fault_path(experiment, fault), "mode"),
        )


# Between two stages of one fault the pipeline runs the stage's metrics task, its gate and the next replay task;
# on a KFP cluster each is a driver and a launcher pod, tens of seconds each (issue 11). The fault is created at
# its first stage's actual start (in that stage's task), so only these gaps, not the steps before the ramp,
# are added to its lifetime. A gap longer than this shows up as uncovered stage time (INCONCLUSIVE), never
# as a stage counted under a fault that had already stopped.
STAGE_GAP_ALLOWANCE = 120.0
# The stage's replay starts only once the object is Selected and AllInjected, and its lifetime counts from its
# creation: the wait is part of it. Measured on the local cluster's real node: ~3 s for a NetworkChaos partition,
# which then stopped (DurationExceeded) in the replay's drain, before the step's last look, and the stage's last
# 2.2 s were unverified (INCONCLUSIVE). A busy cluster takes longer; this allowance is kfchaos's own guess.
INJECT_ALLOWANCE = 30.0


def fault_stage_span(experiment: Experiment, fault: FaultBase) -> list[int]:
    """The ramp's stages from the fault's first listed stage to its last: it is alive through all of them."""
    stages = list(experiment.spec.traffic.stages)
    listed = [stages.index(s) for s in experiment.fault_stages(fault) if s in stages]
    if not listed:
        return []
    return stages[min(listed) : max(listed) + 1]


def fault_duration(experiment: Experiment, fault: FaultBase) -> float:
    """Seconds the fault object lives from its creation at its first stage's start: its own duration, or long
    enough to cover its stages, capped by safety.

    Covering a stage takes its replay (stage_duration) plus the drain of requests still in flight (up to
    target.timeout); each later stage adds STAGE_GAP_ALLOWANCE for the tasks between, and the wait for injection
    before the first adds INJECT_ALLOWANCE. So stages [60, 90] of 10-minute stages with a 30 s timeout last
    30 s + 2 x 630 s + 120 s = 23.5 minutes. A sharded stage (traffic.shards > 1) replays only
    traffic.shard_start_lead after its start task (kfchaos.steps.shards), so each stage adds that lead too: without
    it, a CPU stress over two sharded 40 s stages on the real node ended 9.7 s into the second stage's replay, which
    was then INCONCLUSIVE on fault_active. Chaos Mesh stops the object at creation + duration
    (DurationExceeded); the pipeline removes it after its last stage anyway.
    """
    limit = experiment.spec.safety.max_fault_duration
    if fault.duration is not None:
        return min(fault.duration, limit)
    traffic = experiment.spec.traffic
    count = len(fault_stage_span(experiment, fault)) or len(traffic.stages)
    drain = experiment.spec.target.timeout
    lead = traffic.shard_start_lead if traffic.shards > 1 else 0.0
    per_stage = traffic.stage_duration + drain + lead
    span = INJECT_ALLOWANCE + count * per_stage + (count - 1) * STAGE_GAP_ALLOWANCE
    return min(span, limit)


def short_duration_problem(experiment: Experiment, fault: FaultBase) -> str | None:
    """Why the fault's own `duration` cannot outlast the stages it is planned for, with the arithmetic, or None.

    The object is created at its first stage's start and Chaos Mesh ends it `duration` later; its stages
    need at least their replay time back to back (more with the drain and the tasks between, see
    fault_duration). Shorter, the later stages run without the fault: the verdict then finds them not
    covered (kfchaos.verdict.evaluate.coverage_checks, INCONCLUSIVE), but the file can say so before the run.
    """
    if fault.duration is None or not fault.cluster_side:
        return None
    span = fault_stage_span(experiment, fault)
    stage_duration = experiment.spec.traffic.stage_duration
    needed = len(span) * stage_duration
    if not span or fault.duration >= needed:
        return None
    default = fault_duration(experiment, fault.model_copy(update={"duration": None}))
    return (
        f"duration {fault.duration:g}s ends before its stages do: stages {span} need {len(span)} x "
        f"{stage_duration:g}s = {needed:g}s of replay alone ({default:g}s with the drain and the tasks between, "
        f"the default when duration is left out), so it covers at most {fault.duration / stage_duration:.2g} of "
        f"its {len(span)} stage(s); each stage it does not cover ends INCONCLUSIVE. Leave duration out or "
        f"lengthen it to {default:g}s"
    )
