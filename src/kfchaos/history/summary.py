"""The history of one experiment: its runs oldest first, one row per check and stage across them, a comparison for
each version bump (kfchaos.history.regression) and the failure modes that recur. What every output draws from."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from kfchaos.history.model import Measurement, RunEntry, ordered, versions_in_order
from kfchaos.history.regression import REGRESSION, FailureMode, Regressions, compare, failure_modes


@dataclass(frozen=True)
class Row:
    """One check at one stage across the runs: `cells[i]` is run i's measurement, None where it has none."""

    check: str
    stage: int | None
    unit: str
    limit: float | None
    cells: list[Measurement | None]

    def to_dict(self, runs: list[RunEntry]) -> dict[str, Any]:
        return {
            "check": self.check,
            "stage": self.stage,
            "unit": self.unit,
            "limit": self.limit,
            "runs": [
                None if m is None else {"run_id": r.run_id, "status": m.status, "value": m.value, "limit": m.threshold}
                for r, m in zip(runs, self.cells, strict=True)
            ],
        }


@dataclass(frozen=True)
class History:
    experiment: str
    source: str
    runs: list[RunEntry]
    rows: list[Row]
    versions: list[str]
    comparisons: list[Regressions]
    modes: list[FailureMode]
    unreadable: list[str] = field(default_factory=list)

    @property
    def verified(self) -> list[RunEntry]:
        return [r for r in self.runs if r.verified]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "kfchaos.History",
            "version": 1,
            "experiment": self.experiment,
            "source": self.source,
            "versions": self.versions,
            "runs": [r.to_dict() for r in self.runs],
            "unreadable": self.unreadable,
            "checks": [row.to_dict(self.runs) for row in self.rows],
            "comparisons": [c.to_dict() for c in self.comparisons],
            "failure_modes": [m.to_dict() for m in self.modes],
        }


def _stage_order(key: tuple[str, int | None]) -> tuple[bool, int, str]:
    return (key[1] is None, key[1] or 0, key[0])


def moved_first(rows: list[Row], comparisons: list[Regressions]) -> list[Row]:
    """The rows a regression was found in first, then by how far the median moved at any bump (either way, relative
    to the old version's), largest first; rows that did not move keep their stage order (a stable sort). A reader
    sees what changed before scrolling past what did not."""
    regressed: set[tuple[str, int | None]] = set()
    moved: dict[tuple[str, int | None], float] = {}
    for r in comparisons:
        for c in r.comparisons:
            key = (c.check, c.stage)
            if c.outcome == REGRESSION:
                regressed.add(key)
            moved[key] = max(moved.get(key, 0.0), c.moved)
    return sorted(
        rows, key=lambda row: ((row.check, row.stage) not in regressed, -moved.get((row.check, row.stage), 0.0))
    )


def build(
    experiment: str,
    source: str,
    runs: list[RunEntry],
    unreadable: list[str] | None = None,
    pairs: list[tuple[str, str]] | None = None,
) -> History:
    """The history; `pairs`: the versions to compare (default: each version against the one before it)."""
    runs = ordered(runs)
    keys: dict[tuple[str, int | None], None] = {}
    for run in runs:
        for m in run.measurements:
            keys.setdefault(m.key, None)
    rows = []
    for key in sorted(keys, key=_stage_order):
        cells = [next((m for m in r.measurements if m.key == key), None) for r in runs]
        present = [m for m in cells if m is not None]
        limits = [m.threshold for m in present if m.threshold is not None]
        rows.append(Row(key[0], key[1], present[-1].unit, limits[-1] if limits else None, cells))
    versions = versions_in_order(runs)
    if pairs is None:
        pairs = list(itertools.pairwise(versions))
    comparisons = [compare(runs, old, new) for old, new in pairs]
    return History(
        experiment=experiment,
        source=source,
        runs=runs,
        rows=moved_first(rows, comparisons),
        versions=versions,
        comparisons=comparisons,
        modes=failure_modes(runs),
        unreadable=list(unreadable or []),
    )
