"""Sample sizes before the run: how many requests each stage's plan sends, and whether that many can support the
checks the experiment asks for.

The rule is the verdict's own (kfchaos.verdict.checks): a P99-type check (p99_drift, p99, ttft_p99,
itl_request_p99, tpot_p99) PASSes only when the Clopper-Pearson upper bound of the share of requests above its
limit is at most 1 % (`stats.TAIL`), a rate check (error_rate, timeout_rate) when that bound is at most its
limit, and every sampled check is INCONCLUSIVE below `slo.min_samples`. So the fewest requests that can PASS is
the smallest n whose interval with no request above (no error) is decided PASS by that same `_decide`; with k
above it is larger. Nothing here restates the statistics: it asks `clopper_pearson` and `_decide`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kfchaos.spec import Experiment
from kfchaos.verdict.checks import _decide
from kfchaos.verdict.model import Status
from kfchaos.verdict.stats import TAIL, clopper_pearson

# Beyond this many requests a limit is treated as out of reach (a limit of 0.0001 % would need ~3.7 million).
SEARCH_CAP = 100_000_000
# A stage's plan is counted up to this many requests (about 3 µs each: under a second), so validating a file that
# asks for a million requests a second for hours stays quick; more is reported as "more than COUNT_CAP".
COUNT_CAP = 200_000


def requests_to_pass(limit: float, confidence: float, above: int = 0) -> int | None:
    """The fewest requests, `above` of them beyond the limit, with which the verdict can decide PASS for a share
    limited to `limit`; None when no count up to SEARCH_CAP can (a limit of 0)."""

    def passes(n: int) -> bool:
        return _decide(*clopper_pearson(above, n, confidence), limit) is Status.PASS

    if limit <= 0 or not passes(SEARCH_CAP):
        return None
    low, high = above + 1, SEARCH_CAP  # the upper bound falls as n grows: bisect for the first PASS
    while low < high:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True)
class Need:
    check: str  # the check, or a group of them ("P99-type checks")
    limit: float  # the share the interval is compared with
    requests: int | None  # fewest requests with none above / no events; None: never


@dataclass
class StageSupport:
    stage: int
    planned: int  # workload requests the plan sends (traffic-side fault requests left out: they are the fault)
    needs: list[Need] = field(default_factory=list)
    min_samples: int = 0
    capped: bool = False  # counting stopped at COUNT_CAP: the plan sends at least `planned`

    @property
    def short(self) -> list[Need]:
        """The checks this stage cannot PASS with its planned requests even when nothing goes wrong (a count
        stopped at the cap shows only that it is at least that many)."""
        return [
            n
            for n in self.needs
            if n.requests is None or (not self.capped and self.planned < max(n.requests, self.min_samples))
        ]


def needs(experiment: Experiment) -> list[Need]:
    """What each check the experiment asks for needs, with no request beyond its limit."""
    slo = experiment.spec.slo
    p99_type = ["p99_drift"] + [
        name
        for name, limit in (
            ("p99", slo.p99_max),
            ("ttft_p99", slo.ttft_p99_max),
            ("itl_request_p99", slo.itl_p99_max),
            ("tpot_p99", slo.tpot_p99_max),
        )
        if limit is not None
    ]
    out = [Need(", ".join(p99_type), TAIL, requests_to_pass(TAIL, slo.confidence))]
    for name, limit in (("error_rate", slo.error_rate_max), ("timeout_rate", slo.timeout_rate_max)):
        out.append(Need(name, limit, requests_to_pass(limit, slo.confidence)))
    return out


def stage_support(experiment: Experiment, base_dir: str | Path, duration: float | None = None) -> list[StageSupport]:
    """Per stage of the ramp: the requests its plan sends (exact for a seeded plan: the replay sends this plan)
    and what the checks need. `duration` overrides the stage length (a control baseline's --duration)."""
    from kfchaos.traffic.api import plan_stage  # for start-up speed: the traffic engine loads pyarrow

    wanted = needs(experiment)
    # Counting needs no credential: plan without spec.target.auth, so validate works where the token is not set.
    target = experiment.spec.target.model_copy(update={"auth": None})
    experiment = experiment.model_copy(update={"spec": experiment.spec.model_copy(update={"target": target})})
    overrides = {"traffic_faults": ()} if duration is None else {"traffic_faults": (), "duration": duration}
    out = []
    for stage in experiment.spec.traffic.stages:
        plan = plan_stage(experiment, stage, base_dir=base_dir, **overrides)
        planned = 0
        for _ in plan.schedule():
            planned += 1
            if planned >= COUNT_CAP:
                break
        out.append(StageSupport(stage, planned, wanted, experiment.spec.slo.min_samples, planned >= COUNT_CAP))
    return out


def shortfall(support: StageSupport) -> str:
    """Why a stage cannot be judged (its `short` checks), in the words `validate` and `tune` both use."""
    return (
        f"stage {support.stage}%: {support.planned} requests planned, too few for "
        + "; ".join(
            f"{n.check} (never: limit {100 * n.limit:g}%)"
            if n.requests is None
            else f"{n.check} (needs >= {max(n.requests, support.min_samples)} with none above its limit)"
            for n in support.short
        )
        + ": the stage ends INCONCLUSIVE however well the target holds; raise the rate, stage_duration or "
        "the stage percent"
    )


def describe(support: StageSupport) -> str:
    """One line: the planned requests and, per check, the fewest that can PASS."""
    parts = []
    for need in support.needs:
        if need.requests is None:
            parts.append(f"{need.check} can never PASS (limit {100 * need.limit:g}%)")
        else:
            parts.append(f"{need.check} >= {max(need.requests, support.min_samples)}")
    verdict = "enough" if not support.short else "too few for " + "; ".join(n.check for n in support.short)
    planned = f"{'at least ' if support.capped else ''}{support.planned}"
    return (
        f"stage {support.stage}%: {planned} requests planned; a PASS needs, with none above the limit: "
        f"{', '.join(parts)}: {verdict}"
    )
