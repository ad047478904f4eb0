"""Counter increases: the one rule for every counter the verdict reads (docs/verdict.md, "Counters across gaps").

Restart counts (kube-state-metrics), cAdvisor's OOM events and vLLM's request counter are all differenced here,
per series, and only then summed:
- An increase is counted only between two samples of the same series inside the queried range: the series was
  seen before and after it. A drop is a counter reset (a restarted process), after which the new value is all
  increase, as Prometheus's increase() takes it (prometheus/prometheus promql/functions.go, extrapolatedRate,
  which allows for counter resets where the series is a counter).
- The first sample a series shows in the range sets its level; it is not an event. Absence says nothing: a
  series missing at the range's start and seen later may be an old one that went unscraped for a while (the
  exporter restarting, a scrape gap), whose count holds events from days before.
- Only the series' own start time proves it was born inside the range (a pod's `kube_pod_created`, a container
  cgroup's `container_start_time_seconds`): then the counter began at 0 there and its first value is all increase.
- A series first seen after the range's start with no such proof was unseen meanwhile (`unseen_span`): what its
  count did then is unknown, never zero and never an event.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kfchaos.metrics.source import RangeSeries


def increments(values: NDArray[np.float64], born: bool = False, monotone: bool = False) -> NDArray[np.float64]:
    """Each point's increase since the previous finite point of the *same* series. The first finite point sets
    the level (0), except for a series `born` inside the range (its start time says so), whose counter started
    at 0 there, so its first value is all increase.

    `monotone`: the counter cannot reset (a pod's restartCount, identified by its uid, lives as long as the pod),
    so a lower value is a lagging copy (another kube-state-metrics replica a scrape behind), not a reset: only a
    rise above the highest value seen is an increase."""
    out = np.zeros(len(values))
    previous = 0.0 if born else None
    for index, value in enumerate(values):
        if not np.isfinite(value):
            continue
        if previous is not None:
            if monotone:
                out[index] = max(0.0, value - previous)
            else:
                out[index] = value - previous if value >= previous else value
        previous = max(previous, value) if monotone and previous is not None else value
    return out


def resets(series: RangeSeries) -> list[tuple[float, float]]:
    """(time, 1) at each point where one series' counter dropped: the process that kept it ended (a restart)
    between the point before and this one, and what it counted after its last scrape ended with it."""
    finite = np.nonzero(np.isfinite(series.values))[0]
    values = series.values[finite]
    return [(float(series.times[finite[i + 1]]), 1.0) for i in np.nonzero(np.diff(values) < 0)[0]]


def born_inside(start_time: float | None, since: float | None) -> bool:
    """Whether a series' own start time (None: unknown) proves it began after `since`, the range's start."""
    return start_time is not None and since is not None and start_time > since


def first_seen_late(series: RangeSeries, since: float | None) -> bool:
    """The series' first point lies more than half its spacing after `since`: it was not seen at the start."""
    finite = series.times[np.isfinite(series.values)]
    if since is None or not len(finite):
        return False
    spacing = float(np.min(np.diff(series.times))) if len(series.times) > 1 else 0.0
    return float(finite[0]) > since + spacing / 2


def unseen_span(series: RangeSeries, since: float | None, start_time: float | None) -> tuple[float, float] | None:
    """(since, first sample) where a series that was not born inside the range went unseen from its start, or
    None: its count there is unknown."""
    if since is None or born_inside(start_time, since) or not first_seen_late(series, since):
        return None
    return since, float(series.times[np.isfinite(series.values)][0])


def events(
    series: RangeSeries, since: float | None, start_time: float | None = None, monotone: bool = False
) -> list[tuple[float, float]]:
    """(time, how many) where one series' counter rose, by the rule above."""
    steps = increments(series.values, born=born_inside(start_time, since), monotone=monotone)
    return [(float(series.times[i]), float(steps[i])) for i in np.nonzero(steps > 0)[0]]


def start_times(found: list[RangeSeries], identity: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """The start time of each object a `..._created` / `..._start_time_seconds` gauge names, by its `identity`
    labels: the gauge's newest value (a start time does not change; the newest is the current object's)."""
    out: dict[tuple[str, ...], float] = {}
    for one in found:
        finite = one.values[np.isfinite(one.values)]
        if len(finite):
            key = tuple(one.labels.get(k, "") for k in identity)
            out[key] = max(out.get(key, -np.inf), float(finite[-1]))
    return out
