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
  checked, and the check says so;
- its duration against the plan from the other side: a stage whose intended sends span far more than
  `stage_duration` (plus LOAD_TOLERANCE and three gaps) held a fraction of the rate it names -> INCONCLUSIVE;
- the rate it delivered over time, window by window (`windowed`): the stage's count and span can match the
  plan while its rate was never held (all of it sent in a burst, then idle; stretched over ten times the
  span). Each LOAD_WINDOW_S window of the planned span counts the requests actually sent in it (their `sent`
  times: what the target saw) against what the plan puts in it: the planned rate x the window where the plan
  is a constant rate (plain synthetic traffic: poisson, gamma or constant arrivals, no daily shape), else
  the plan's own intended sends in that window (a recording's rate varies by design, and the plan is the
  recording). A window further off than WINDOW_TOLERANCE of its planned count, or five standard deviations
  of its arrivals, is off; any window off -> INCONCLUSIVE naming the windows. A window is widened to hold
  MIN_WINDOW_REQUESTS planned requests; a stage too slow for two such windows is judged by its totals only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kfchaos.baseline import Baseline
from kfchaos.spec import Experiment
from kfchaos.verdict.model import Check, Status
from kfchaos.verdict.requests import Requests

LOAD_TOLERANCE = 0.10  # a stage may fall this share short of its planned duration or requests
LOAD_WINDOW_S = 10.0  # the delivered rate is judged over windows this long (widened for slow stages)
MIN_WINDOW_REQUESTS = 100  # a window holds at least this many planned requests (5 sigma of Poisson = 50 %)
WINDOW_TOLERANCE = 0.5  # a window delivering less than half, or more than 1.5 x, its planned count is off
WINDOW_SIGMAS = 5.0  # ... unless within this many standard deviations of its arrivals (small windows)
LATE_SEND_S = 1.0  # a send this late after the planned end still belongs to the last window (the engine's grace)


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


@dataclass(frozen=True)
class WindowedRate:
    """The stage's delivered rate over windows of its planned span (see the module's docstring)."""

    width: float
    start: float
    lengths: NDArray[np.float64]  # seconds of each window (the last one may be shorter)
    planned: NDArray[np.float64]  # requests the plan puts in each window
    delivered: NDArray[np.int64]  # requests sent in each window (by their send time)
    off: NDArray[np.bool_]
    planned_from: str

    def to_dict(self) -> dict[str, object]:
        return {
            "width_s": self.width,
            "start": self.start,
            "planned": [round(float(v), 3) for v in self.planned],
            "delivered": [int(v) for v in self.delivered],
            "off": [int(i) for i in np.flatnonzero(self.off)],
            "planned_from": self.planned_from,
            "tolerance": WINDOW_TOLERANCE,
        }

    def describe_off(self, limit: int = 4) -> str:
        """Runs of off windows with their delivered and planned rates: "windows 2-5 of 12 (10s each) delivered
        0-3.1/s against 100/s planned"."""
        index = np.flatnonzero(self.off)
        above = self.delivered > self.planned
        runs: list[tuple[int, int]] = []  # consecutive off windows off the same way (all above or all below)
        for i in index.tolist():
            if runs and runs[-1][1] == i - 1 and above[i] == above[i - 1]:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        parts = []
        for low, high in runs[:limit]:
            seconds = self.lengths[low : high + 1]
            delivered = self.delivered[low : high + 1] / seconds
            planned = self.planned[low : high + 1] / seconds
            where = f"window {low + 1}" if low == high else f"windows {low + 1}-{high + 1}"
            parts.append(f"{where} delivered {_span_of(delivered)}/s against {_span_of(planned)}/s planned")
        more = f"; {len(runs) - limit} more run(s)" if len(runs) > limit else ""
        return (
            f"{len(index)} of its {len(self.off)} windows ({self.width:g}s each) were off the planned rate by more "
            f"than {100 * WINDOW_TOLERANCE:g}%: " + "; ".join(parts) + more
        )


def _span_of(values: NDArray[np.float64]) -> str:
    low, high = float(values.min()), float(values.max())
    return f"{low:.3g}" if abs(high - low) < 1e-9 else f"{low:.3g}-{high:.3g}"


def constant_rate(experiment: Experiment) -> tuple[float, float] | None:
    """(requests per second at 100 %, variance of a window's count per planned request) when the plan is a
    constant rate (plain synthetic arrivals, no daily shape), else None: a gamma arrival of shape k has
    count variance about mean / k (a renewal process), Poisson the mean, constant arrivals less."""
    synthetic = experiment.spec.traffic.synthetic
    if synthetic is None or synthetic.rate is None or synthetic.daily_shape or synthetic.realistic:
        return None
    if synthetic.arrival not in ("poisson", "gamma", "constant"):
        return None
    dispersion = 1.0 / synthetic.burstiness if synthetic.arrival == "gamma" else 1.0
    return synthetic.rate, max(1.0, dispersion)


def windowed(requests: Requests, experiment: Experiment, stage: int) -> WindowedRate | None:
    """The delivered rate per window of the stage's planned span, or None when the stage is too slow (or too
    short) for two windows of MIN_WINDOW_REQUESTS planned requests: its totals are then its one window."""
    traffic = experiment.spec.traffic
    planned_s = traffic.stage_duration
    intended = requests.intended
    if not len(intended) or not np.isfinite(intended).any():
        return None
    start = float(np.nanmin(intended))
    constant = constant_rate(experiment)
    if constant is not None:
        rate = constant[0] * traffic.speed * stage / 100.0 * traffic.rate_scale
        dispersion = constant[1]
        planned_from = f"the planned rate {rate:.4g}/s (traffic.synthetic.rate x speed x stage x rate_scale)"
    else:
        rate = len(intended) / planned_s
        dispersion = 1.0
        planned_from = "the plan's own intended send times (recorded or shaped traffic)"
    if rate <= 0:
        return None
    width = max(LOAD_WINDOW_S, MIN_WINDOW_REQUESTS / rate)
    count = math.ceil(planned_s / width - 1e-9)
    if count < 2:
        return None
    edges = start + width * np.arange(count + 1, dtype=np.float64)
    edges[-1] = start + planned_s
    sent = requests.sent[requests.was_sent()]
    # The last window also takes the sends of requests due just before the end and sent a little late.
    last_edge = edges.copy()
    last_edge[-1] += LATE_SEND_S
    delivered = np.histogram(sent, bins=last_edge)[0].astype(np.int64)
    if constant is not None:
        planned = rate * np.diff(edges)
    else:
        planned = np.histogram(intended, bins=edges)[0].astype(np.float64)
    allowed = np.maximum(WINDOW_TOLERANCE * planned, WINDOW_SIGMAS * np.sqrt(dispersion * planned))
    off = np.abs(delivered - planned) > allowed
    return WindowedRate(width, start, np.diff(edges), planned, delivered, off, planned_from)


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
    elif span - planned_s > LOAD_TOLERANCE * planned_s + 3 * gap:
        problems.append(
            f"its sends span {span:.1f}s, {span / planned_s:.1f} x its planned {planned_s:g}s: the rate it names "
            f"was held for at most {100 * planned_s / span:.0f}% of that time (at most {100 * LOAD_TOLERANCE:g}% "
            "longer allowed)"
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
    rates = windowed(requests, experiment, stage)
    if rates is not None:
        details["windows"] = rates.to_dict()
        if rates.off.any():
            problems.append(rates.describe_off())
        else:
            figures += f"; every {rates.width:g}s window within {100 * WINDOW_TOLERANCE:g}% of the plan"
    else:
        details["windows"] = None
    if problems:
        reason = "the stage did not apply its planned load: " + "; ".join(problems)
        return Check(name, Status.INCONCLUSIVE, reason, span / planned_s, 1 - LOAD_TOLERANCE, None, sent,
                     "fraction", details=details)  # fmt: skip
    if plan is None:
        figures += f" of {planned_s:g}s (planned rate unknown: one stage of recorded traffic; duration checked only)"
    return Check(name, Status.PASS, figures, span / planned_s, 1 - LOAD_TOLERANCE, None, sent, "fraction",
                 details=details)  # fmt: skip
