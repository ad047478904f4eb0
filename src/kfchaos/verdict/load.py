"""The load a stage claims was applied: achieved requests and duration against the plan (docs/verdict.md, "Load").

A stage is judged as the experiment's percentage of production traffic for `traffic.stage_duration`. A stage
whose replay stopped early, or that sent a fraction of its requests (a shard's records missing, a replayer
capped), measured a lighter load than it names: its PASS would be a false one. So each stage compares

- its duration, from the first to the last intended send time of its own traffic (the fault's burst requests
  left out), with `stage_duration`: short by more than LOAD_TOLERANCE of the plan (plus three mean gaps
  between requests, the last request's distance from the end by chance) -> INCONCLUSIVE;
- its requests sent with the plan where the plan's rate is known: `traffic.synthetic.rate` without a daily
  shape, scaled as the replay plan scales it (kfchaos.traffic.plan: a stage keeps `stage/100 x rate_scale`
  of the source's requests on a time scale of `speed`, so its rate is rate x speed x stage/100 x
  rate_scale), else the control baseline's planned rate for the stage, else (recorded traffic, a daily
  shape) the other stages: every stage replays the same source from its start, keeping stage/100 of its
  requests (kfchaos.traffic.plan `_recorded`, `fraction`, `time_scale`), so each stage's rate per percent is
  the same up to sampling noise, and the median over the stages that ran is the reference. Short by more
  than LOAD_TOLERANCE (plus three standard deviations of a Poisson count) -> INCONCLUSIVE with the figures.
  Where none gives the rate (one stage of recorded traffic, no control baseline), only the duration is
  checked, and the check says so.
"""

from __future__ import annotations

import math

import numpy as np

from kfchaos.baseline import Baseline
from kfchaos.spec import Experiment
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import Requests

LOAD_TOLERANCE = 0.10  # a stage may fall this share short of its planned duration or requests


def ramp_rates(experiment: Experiment, sent: dict[int, int]) -> float | None:
    """Requests per second per percent of load, the median over the stages that sent any (`sent`: stage ->
    requests sent), or None with fewer than two such stages (one stage cannot check itself)."""
    duration = experiment.spec.traffic.stage_duration
    rates = [count / duration / stage for stage, count in sent.items() if count > 0]
    return float(np.median(rates)) if len(rates) >= 2 else None


def planned_rate(
    experiment: Experiment, stage: int, baseline: Baseline | None, per_percent: float | None = None
) -> tuple[float, str] | None:
    """(requests per second the stage's plan sends, where that figure comes from), or None when unknown.
    `per_percent`: the ramp's rate per percent of load (`ramp_rates`), the last resort."""
    traffic = experiment.spec.traffic
    synthetic = traffic.synthetic
    if synthetic is not None and synthetic.rate is not None and not synthetic.daily_shape:
        rate = synthetic.rate * traffic.speed * stage / 100.0 * traffic.rate_scale
        return rate, "traffic.synthetic.rate x speed x stage x rate_scale"
    control = baseline.control.stage(stage) if baseline is not None and baseline.control is not None else None
    if control is not None and control.rate > 0:
        return control.rate, "the control baseline's planned rate"
    if per_percent is not None:
        return per_percent * stage, "the other stages' rate per percent (median)"
    return None


def load_check(
    requests: Requests,
    experiment: Experiment,
    stage: int,
    baseline: Baseline | None,
    per_percent: float | None = None,
) -> Check:
    """Give it the stage's own traffic (the fault's requests left out); `per_percent` from `ramp_rates`."""
    name = "load"
    planned_s = experiment.spec.traffic.stage_duration
    intended = requests.intended[np.isfinite(requests.intended)]
    if not len(intended):
        return Check(name, Status.INCONCLUSIVE, "no request was planned in the stage", threshold=planned_s)
    span = float(intended.max() - intended.min())
    gap = span / (len(intended) - 1) if len(intended) > 1 else planned_s
    sent = int(np.count_nonzero(requests.was_sent()))
    details: dict[str, object] = {
        "planned_duration_s": planned_s,
        "duration_s": span,
        "sent": sent,
        "tolerance": LOAD_TOLERANCE,
    }
    problems = []
    if planned_s - span > LOAD_TOLERANCE * planned_s + 3 * gap:
        problems.append(
            f"ran {span:.1f}s of its planned {planned_s:g}s ({100 * span / planned_s:.0f}%; at most "
            f"{100 * LOAD_TOLERANCE:g}% short allowed)"
        )
    plan = planned_rate(experiment, stage, baseline, per_percent)
    figures = f"{sent} requests over {span:.1f}s"
    if plan is not None:
        rate, source = plan
        expected = rate * planned_s
        details |= {"planned_requests": expected, "planned_rate": rate, "planned_rate_from": source}
        if expected - sent > LOAD_TOLERANCE * expected + 3 * math.sqrt(expected):
            problems.append(
                f"sent {sent} of its {expected:.0f} planned requests ({100 * sent / expected:.0f}%; "
                f"{rate:.4g}/s from {source}; at most {100 * LOAD_TOLERANCE:g}% short allowed)"
            )
        figures = f"{sent} of {expected:.0f} planned requests over {span:.1f}s of {planned_s:g}s"
    if problems:
        reason = "the stage did not apply its planned load: " + "; ".join(problems)
        return Check(name, Status.INCONCLUSIVE, reason, span / planned_s, 1 - LOAD_TOLERANCE, None, sent,
                     "fraction", details=details)  # fmt: skip
    if plan is None:
        figures += f" of {planned_s:g}s (planned rate unknown: one stage of recorded traffic; duration checked only)"
    return Check(name, Status.PASS, figures, span / planned_s, 1 - LOAD_TOLERANCE, None, sent, "fraction",
                 details=details)  # fmt: skip
