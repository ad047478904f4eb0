"""Metric series collected during a run, as the verdict reads them (`--metrics M.json`).

A snapshot records what was asked and what came back, including what did *not* come back: a query that
failed keeps its error, an unreachable server keeps its message, so the verdict can say INCONCLUSIVE with
the reason instead of mistaking absence for health.

JSON shape:
    {"source": "http://prometheus:9090", "unreachable": null,
     "series": {"oom_kills": {"query": "...", "unit": "count", "kind": "counter", "points": [[t, v], ...]}},
     "errors": {"kv_cache_usage": "bad_data: parse error at char 5 ..."}, "grace": 60.0}

`grace` is the scrape interval of the source (seconds): an event at the end of a window shows up to one
interval later, so event counts read [start, end + grace] (kfchaos.metrics.oom.count).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from kfchaos import safefile
from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json

SeriesKind = Literal["counter", "gauge"]
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

    def between(self, start: float, end: float) -> Series:
        keep = (self.times >= start) & (self.times <= end)
        return Series(self.name, self.times[keep], self.values[keep], self.kind, self.query, self.unit)

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
                for name, s in self.series.items()
            },
            "errors": dict(self.errors),
            "grace": self.grace,
        }

    def write(self, path: str | Path) -> None:
        safefile.write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, data: Any, source_file: str = "metrics") -> MetricsSnapshot:
        if not isinstance(data, dict):
            raise SnapshotError(f"{source_file}: expected a JSON object with 'series', got {type(data).__name__}")
        unknown = sorted(set(data) - {"source", "unreachable", "series", "errors", "grace"})
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
            series[name] = Series(
                name, times[order], values[order], kind, str(raw.get("query", "")), str(raw.get("unit", ""))
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
        )

    @classmethod
    def load(cls, path: str | Path) -> MetricsSnapshot:
        try:
            data = load_json(path, "metrics", finite_only=False)  # bounded: size, depth, huge integers
        except KfchaosError as exc:
            raise SnapshotError(str(exc)) from None
        return cls.from_dict(data, str(path))
