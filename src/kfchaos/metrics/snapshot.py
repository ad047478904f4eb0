"""Metric series collected during a run, as the verdict reads them (`--metrics M.json`).

A snapshot records what was asked and what came back, including what did *not* come back: a query that
failed keeps its error, an unreachable server keeps its message, so the verdict can say INCONCLUSIVE with
the reason instead of mistaking absence for health.

JSON shape:
    {"source": "http://prometheus:9090", "unreachable": null,
     "series": {"oom_kills": {"query": "...", "unit": "count", "kind": "counter", "points": [[t, v], ...]}},
     "errors": {"kv_cache_usage": "bad_data: parse error at char 5 ..."}, "grace": 60.0,
     "clock": {"skew_s": 0.004, "uncertainty_s": 0.002, "measured_at": 1764000000.0}}

`grace` is the scrape interval of the source (seconds): an event at the end of a window shows up to one
interval later, so event counts read [start, end + grace] (kfchaos.metrics.oom.count).

Freshness (docs/verdict.md "Freshness"). A range query does not say when its samples were taken: for each
step Prometheus returns the newest sample up to `lookbackDelta` (5 minutes by default) old
(prometheus/prometheus promql/engine.go, `lookbackDelta` / `defaultLookbackDelta`), so a series whose
scrapes stopped repeats its last value for five minutes -- and for ever where no staleness marker was
written (Prometheus writes one when a target disappears or a scrape fails, docs/querying/basics.md
"Staleness"; not for a Prometheus restart, backfilled blocks, or remote-written data). A counter that stops
is then read as "no increase". So a series may carry `sampled`: at each point the timestamp of the sample
behind it (PromQL `timestamp()`), and without it the points' own times are what is known. A gap longer
than FRESH_SCRAPES scrape intervals (plus the query step) inside a judged window makes the series *stale*
there: what happened in the gap is unknown, not zero (`MetricsSnapshot.stale`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from kfchaos import safefile
from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json

SeriesKind = Literal["counter", "gauge"]
FRESH_SCRAPES = 3  # a series unseen for more than this many scrape intervals (+ one step) has a gap
DEFAULT_GRACE = 60.0  # Prometheus's default scrape_interval (1m) where the source's own is unknown


class SnapshotError(KfchaosError):
    """A metrics snapshot file is unreadable or malformed."""


@dataclass(frozen=True)
class Series:
    name: str
    times: NDArray[np.float64]
    values: NDArray[np.float64]
    kind: SeriesKind = "gauge"
    query: str = ""
    unit: str = ""
    sampled: NDArray[np.float64] | None = None  # per point: when its sample was taken (NaN: unknown)

    def between(self, start: float, end: float) -> Series:
        keep = (self.times >= start) & (self.times <= end)
        sampled = None if self.sampled is None else self.sampled[keep]
        return Series(self.name, self.times[keep], self.values[keep], self.kind, self.query, self.unit, sampled)

    @property
    def step(self) -> float:
        """The usual spacing of the points (the query step); 0 with fewer than two."""
        return float(np.median(np.diff(self.times))) if len(self.times) > 1 else 0.0

    def sample_times(self) -> NDArray[np.float64]:
        """When the samples behind the points were taken, ascending: `sampled` where known, else the times
        of the points that have a value."""
        if self.sampled is not None:
            return np.unique(self.sampled[np.isfinite(self.sampled)])
        return np.unique(self.times[np.isfinite(self.values)])

    def largest_gap(self, start: float, end: float) -> tuple[float, float] | None:
        """The longest stretch of [start, end] with no sample, as (last sample before it, next sample or
        `end`); a series with no sample at or before `start` is unseen from `start`. None for an empty window."""
        if end <= start:
            return None
        taken = self.sample_times()
        before = taken[taken <= start]
        knots = [float(before[-1]) if len(before) else start]
        knots += [float(t) for t in taken[(taken > start) & (taken <= end)]]
        knots.append(end)
        spans = np.diff(np.array(knots))
        longest = int(np.argmax(spans))
        return knots[longest], knots[longest + 1]

    def increase(self, start: float, end: float) -> float | None:
        """Counter increase over [start, end], counting resets as Prometheus does; None without two points.

        The last point at or before `start` is the reference, so an event between that point and the window
        start is not counted twice with the previous window.
        """
        before = np.nonzero(self.times <= start)[0]
        first = int(before[-1]) if len(before) else 0
        inside = np.nonzero(self.times <= end)[0]
        if not len(inside):
            return None
        last = int(inside[-1])
        values = self.values[first : last + 1]
        values = values[np.isfinite(values)]
        if len(values) < 2:
            return None
        steps = np.diff(values)
        # A drop is a counter reset (pod restart): the new value is all increase since the reset.
        return float(np.where(steps >= 0, steps, values[1:]).sum())

    def max_between(self, start: float, end: float) -> float | None:
        window = self.between(start, end).values
        window = window[np.isfinite(window)]
        return float(window.max()) if len(window) else None


@dataclass
class MetricsSnapshot:
    source: str = ""
    series: dict[str, Series] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    unreachable: str | None = None
    grace: float = DEFAULT_GRACE
    # Prometheus's clock against the collecting machine's, measured when the snapshot was taken
    # (kfchaos.metrics.served.clock_skew): {"skew_s", "uncertainty_s", "measured_at"}; None where not measured.
    clock: dict[str, float] | None = None

    def missing(self, name: str) -> str | None:
        """Why series `name` cannot be used, or None when it can."""
        if self.unreachable:
            return f"metrics source {self.source or '(unnamed)'} unreachable: {self.unreachable}"
        if name in self.errors:
            return f"query for {name} failed: {self.errors[name]}"
        if name not in self.series:
            return f"series {name} missing from the metrics"
        if not len(self.series[name].times):
            return f"series {name} has no points"
        return None

    def stale(self, name: str, start: float, end: float) -> str | None:
        """Why series `name` cannot be trusted over [start, end] (a gap in its samples longer than
        FRESH_SCRAPES scrape intervals plus one step), or None when it was seen throughout. Call it for a
        series that is not `missing`."""
        series = self.series[name]
        gap = series.largest_gap(start, end)
        allowed = FRESH_SCRAPES * self.grace + series.step
        if gap is None or gap[1] - gap[0] <= allowed:
            return None
        low, high = gap
        return (
            f"series {name} has no sample from {_clock(low)} to {_clock(high)} ({high - low:.0f}s, more than "
            f"{FRESH_SCRAPES} scrape intervals of {self.grace:g}s + the {series.step:g}s step) inside "
            f"{_clock(start)}..{_clock(end)}: what happened in the gap is unknown, not zero"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "unreachable": self.unreachable,
            "series": {
                name: {
                    "query": s.query,
                    "kind": s.kind,
                    "unit": s.unit,
                    "points": [
                        [float(t), float(v) if math.isfinite(v) else None]
                        for t, v in zip(s.times, s.values, strict=True)
                    ],
                }
                | ({} if s.sampled is None else {"sampled": [_number(v) for v in s.sampled]})
                for name, s in self.series.items()
            },
            "errors": dict(self.errors),
            "grace": self.grace,
        } | ({} if self.clock is None else {"clock": dict(self.clock)})

    def write(self, path: str | Path) -> None:
        safefile.write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, data: Any, source_file: str = "metrics") -> MetricsSnapshot:
        if not isinstance(data, dict):
            raise SnapshotError(f"{source_file}: expected a JSON object with 'series', got {type(data).__name__}")
        unknown = sorted(set(data) - {"source", "unreachable", "series", "errors", "grace", "clock"})
        if unknown:
            raise SnapshotError(f"{source_file}: unknown field(s) {', '.join(unknown)}")
        series: dict[str, Series] = {}
        raw_series = data.get("series", {})
        if not isinstance(raw_series, dict):
            raise SnapshotError(f"{source_file}: series must be an object of name -> series")
        for name, raw in raw_series.items():
            where = f"{source_file}: series.{name}"
            if not isinstance(raw, dict) or not isinstance(raw.get("points"), list):
                raise SnapshotError(f"{where}: needs 'points', a list of [time, value]")
            try:
                pairs = [(float(t), math.nan if v is None else float(v)) for t, v in raw["points"]]
            except (TypeError, ValueError, OverflowError):
                raise SnapshotError(f"{where}.points: each point must be [epoch seconds, number or null]") from None
            kind = raw.get("kind", "gauge")
            if kind not in ("counter", "gauge"):
                raise SnapshotError(f"{where}.kind: {kind!r} is not counter or gauge")
            times = np.array([p[0] for p in pairs], dtype=np.float64)
            order = np.argsort(times, kind="stable")
            values = np.array([p[1] for p in pairs], dtype=np.float64)
            sampled = _sampled(where, raw.get("sampled"), len(pairs))
            series[name] = Series(
                name,
                times[order],
                values[order],
                kind,
                str(raw.get("query", "")),
                str(raw.get("unit", "")),
                None if sampled is None else sampled[order],
            )
        errors = data.get("errors", {})
        if not isinstance(errors, dict):
            raise SnapshotError(f"{source_file}: errors must be an object of name -> message")
        unreachable = data.get("unreachable")
        grace = data.get("grace", DEFAULT_GRACE)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 3600:
            raise SnapshotError(f"{source_file}: grace must be seconds between 0 and 3600, got {grace!r}")
        return cls(
            str(data.get("source", "")),
            series,
            {str(k): str(v) for k, v in errors.items()},
            unreachable and str(unreachable),
            float(grace),
            _clock_reading(source_file, data.get("clock")),
        )

    @classmethod
    def load(cls, path: str | Path) -> MetricsSnapshot:
        try:
            data = load_json(path, "metrics", finite_only=False)  # bounded: size, depth, huge integers
        except KfchaosError as exc:
            raise SnapshotError(str(exc)) from None
        return cls.from_dict(data, str(path))


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clock_reading(source_file: str, raw: Any) -> dict[str, float] | None:
    """A snapshot's `clock`: finite seconds for skew_s, uncertainty_s and measured_at, or absent."""
    if raw is None:
        return None
    keys = ("skew_s", "uncertainty_s", "measured_at")
    if not isinstance(raw, dict) or set(raw) != set(keys):
        raise SnapshotError(f"{source_file}: clock must be an object of {', '.join(keys)}")
    values = {k: raw[k] for k in keys}
    if any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) for v in values.values()):
        raise SnapshotError(f"{source_file}: clock: {', '.join(keys)} must be finite seconds")
    if values["uncertainty_s"] < 0:
        raise SnapshotError(f"{source_file}: clock.uncertainty_s must not be negative")
    return {k: float(v) for k, v in values.items()}


def _sampled(where: str, raw: Any, count: int) -> NDArray[np.float64] | None:
    """A series' `sampled` list: one epoch second (or null) per point, or absent."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != count:
        raise SnapshotError(f"{where}.sampled: expected one epoch time (or null) per point ({count})")
    try:
        return np.array([math.nan if v is None else float(v) for v in raw], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise SnapshotError(f"{where}.sampled: each entry must be epoch seconds or null") from None
