"""When a fault was verifiably active: observations through the backend -> verified windows -> coverage.

A stage counts as under fault only for the time its fault was *seen* active, never for the time it was
meant to be. The replay step polls each fault through its backend while the replay runs (Chaos Mesh:
`AllInjected` True and `status.experiment.desiredPhase` Run; the local proxy: the fault listed and not
expired) and keeps each observation. A verified window is a run of consecutive active observations, from
the first to the last of them: the time between an active observation and the next inactive one is
unknown, so it is not counted. The first observation is taken before the replay starts and the last after
it ends, so a fault that stays active covers its whole stage.

The JSON shape these produce (`FaultActivity.to_dict`) is documented in docs/verdict.md, "Fault windows".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

Window = tuple[float, float]

# "Nearly all" of a stage: a fault may be unverified for at most this share of the stage's replay window.
MAX_UNCOVERED_SHARE = 0.02


def verified_windows(observations: Sequence[tuple[float, bool]]) -> list[Window]:
    """Runs of consecutive active observations (time-ordered), each as (first, last) observation time."""
    windows: list[Window] = []
    start: float | None = None
    last = 0.0
    for at, active in sorted(observations, key=lambda o: o[0]):
        if active:
            if start is None:
                start = at
            last = at
        elif start is not None:
            windows.append((start, last))
            start = None
    if start is not None:
        windows.append((start, last))
    return windows


def covered_seconds(windows: Iterable[Window], start: float, end: float) -> float:
    """Seconds of [start, end] inside the union of `windows`."""
    total, reach = 0.0, start
    for low, high in sorted(windows):
        low, high = max(low, reach), min(high, end)
        if high > low:
            total += high - low
            reach = high
    return total


def active_at(windows: Sequence[Window], times: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Whether each time lies inside a verified window (NaN times are not)."""
    out = np.zeros(len(times), dtype=np.bool_)
    for low, high in windows:
        out |= (times >= low) & (times <= high)
    return out


@dataclass
class FaultActivity:
    """One fault as one stage saw it: when it was applied, verified, and removed (epoch seconds)."""

    fault: str
    name: str  # the backend object's name (Chaos Mesh object, proxy fault)
    kind: str
    stages: list[int]  # the stages the experiment file puts it under
    applied_at: float | None  # when it was created (in its first stage's task)
    observations: list[tuple[float, bool]] = field(default_factory=list)
    removed_at: float | None = None  # set in its last stage's task, once removal was confirmed
    errors: list[str] = field(default_factory=list)  # why an observation failed (counted as inactive)
    injected_at: float | None = None  # when the backend says it took effect (its own clock), where it says

    @property
    def verified(self) -> list[Window]:
        return verified_windows(self.observations)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "name": self.name,
            "kind": self.kind,
            "stages": list(self.stages),
            "applied_at": self.applied_at,
            "injected_at": self.injected_at,
            "verified": [{"from": low, "to": high} for low, high in self.verified],
            "removed_at": self.removed_at,
            "observations": len(self.observations),
            "errors": self.errors[-5:],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultActivity:
        """Back from `to_dict` (the windows are kept as two observations each: enough to rebuild them)."""
        observations: list[tuple[float, bool]] = []
        for window in data.get("verified") or []:
            observations += [(float(window["from"]), True), (float(window["to"]), True)]
            observations.append((float(window["to"]) + 1e-9, False))
        return cls(
            fault=str(data["fault"]),
            name=str(data.get("name", "")),
            kind=str(data.get("kind", "")),
            stages=[int(s) for s in data.get("stages") or []],
            applied_at=data.get("applied_at"),
            injected_at=data.get("injected_at"),
            observations=observations,
            removed_at=data.get("removed_at"),
            errors=list(data.get("errors") or []),
        )


@dataclass(frozen=True)
class Coverage:
    fault: str
    window: Window
    covered: float
    uncovered: float

    @property
    def share_uncovered(self) -> float:
        length = self.window[1] - self.window[0]
        return self.uncovered / length if length > 0 else (0.0 if self.covered else 1.0)

    @property
    def ok(self) -> bool:
        length = self.window[1] - self.window[0]
        if length <= 0:  # a single instant: it must lie in a verified window
            return self.covered > 0 or self.uncovered == 0
        return self.share_uncovered <= MAX_UNCOVERED_SHARE


def coverage(activity: FaultActivity, window: Window) -> Coverage:
    """How much of a stage's replay window `activity` was verified active."""
    start, end = window
    windows = activity.verified
    if end <= start:
        inside = any(low <= start <= high for low, high in windows)
        return Coverage(activity.fault, window, 1.0 if inside else 0.0, 0.0 if inside else 1.0)
    covered = covered_seconds(windows, start, end)
    return Coverage(activity.fault, window, covered, (end - start) - covered)


class Poller:
    """Observe faults every `interval` seconds on a thread while the replay runs (`with Poller(...):`).

    `observe(name)` returns whether the fault is verified active now; an exception counts as not active
    (blind is not verified) and its message is kept."""

    def __init__(
        self,
        activities: Sequence[FaultActivity],
        observe: Callable[[FaultActivity], bool],
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.activities = list(activities)
        self.observe = observe
        self.interval = interval
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-poller", daemon=True)

    def poll_once(self) -> None:
        for activity in self.activities:
            try:
                active = bool(self.observe(activity))
            except Exception as exc:
                active = False
                activity.errors.append(f"{type(exc).__name__}: {exc}")
            activity.observations.append((self.clock(), active))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def __enter__(self) -> Poller:
        self.poll_once()  # before the replay's first request
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if kind is None:  # left by an error or a signal: no time to spend on one more look
            self.poll_once()  # after its last response


def run_fault_windows(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per fault over the whole run, from the stage steps' `detail.fault_windows`: when it was
    applied and removed, and every verified window in every stage it was watched in (the shape of
    docs/verdict.md, "Fault windows"; what the report shades)."""
    merged: dict[str, dict[str, Any]] = {}
    for step in steps:
        if step.get("step") != "stage":
            continue
        for item in (step.get("detail") or {}).get("fault_windows") or []:
            if not isinstance(item, dict) or "fault" not in item:
                continue
            entry = merged.setdefault(
                str(item["fault"]),
                {
                    "fault": item["fault"],
                    "name": item.get("name"),
                    "kind": item.get("kind"),
                    "stages": item.get("stages") or [],
                    "applied_at": None,
                    "injected_at": None,
                    "verified": [],
                    "removed_at": None,
                    "watched_in": [],
                },
            )
            # A fault applied again in each stage (a traffic fault such as LoRA churn runs per stage) started at
            # its first apply and ended at its last removal: the later stages must not move its start.
            for key, pick in (("applied_at", min), ("injected_at", min), ("removed_at", max)):
                if item.get(key) is not None:
                    entry[key] = item[key] if entry[key] is None else pick(entry[key], item[key])
            entry["verified"] += [{**w, "stage": step.get("stage")} for w in item.get("verified") or []]
            entry["watched_in"].append(step.get("stage"))
    return list(merged.values())


def stage_activities(run_windows: Sequence[dict[str, Any]]) -> dict[int, list[FaultActivity]]:
    """Back from the run-level `fault_windows` (`run_fault_windows`) to what each stage saw of its faults."""
    out: dict[int, list[FaultActivity]] = {}
    for entry in run_windows:
        for stage in entry.get("watched_in") or []:
            windows = [w for w in entry.get("verified") or [] if w.get("stage") == stage]
            item = {**entry, "verified": windows}
            out.setdefault(int(stage), []).append(FaultActivity.from_dict(item))
    return out
