"""What every metrics source returns, and the Protocol they implement (Prometheus HTTP API, direct scrape)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    time: float
    value: float


@dataclass(frozen=True)
class RangeSeries:
    labels: dict[str, str]
    times: NDArray[np.float64]
    values: NDArray[np.float64]


class MetricsSource(Protocol):
    url: str

    def instant(self, query: str, at: float | None = None) -> list[Sample]:
        """The query's value per series at `at` (default: now)."""
        ...

    def range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """The query evaluated every `step` seconds over [start, end]."""
        ...


def as_series(samples: list[RangeSeries]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One series from a result expected to hold at most one (an aggregated query); empty arrays for none."""
    if not samples:
        return np.empty(0), np.empty(0)
    if len(samples) > 1:
        raise ValueError(f"expected one series, got {len(samples)}: aggregate the query (sum by ...)")
    return samples[0].times, samples[0].values
