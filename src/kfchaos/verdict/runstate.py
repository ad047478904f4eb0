"""Facts about a run that the records cannot tell: which faults were verified injected, which stages the
replayer marked invalid, when the faults were removed. The pipeline writes them as JSON:

    {"faults_verified": {"pod-kill": true}, "stage_valid": {"10": true, "30": "send lag 80ms"},
     "faults_removed_at": 1764000000.0, "fault_windows": [...]}

`fault_windows` is the run-level list of the pipeline's verdict document and audit record (docs/verdict.md,
"Fault windows"): with it, each stage is judged on the time its faults were verified active.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json


class RunStateError(KfchaosError):
    pass


@dataclass(frozen=True)
class RunState:
    faults_verified: bool | dict[str, bool] | None = None
    stage_valid: dict[int, bool | str] = field(default_factory=dict)
    faults_removed_at: float | None = None
    fault_windows: list[dict[str, Any]] = field(default_factory=list)
    # The pipeline's recovery check (a Check's to_dict), measured on its recovery probe's records, which the
    # run folder does not hold: used only when the records have nothing after the removal (kfchaos.rundir).
    recovery: dict[str, Any] | None = None


def load_run_state(path: str | Path) -> RunState:
    try:
        data = load_json(path, "run state")
    except KfchaosError as exc:
        raise RunStateError(str(exc)) from None
    if not isinstance(data, dict):
        raise RunStateError(f"{path}: expected a JSON object")
    unknown = sorted(set(data) - {"faults_verified", "stage_valid", "faults_removed_at", "fault_windows", "recovery"})
    if unknown:
        raise RunStateError(f"{path}: unknown field(s) {', '.join(unknown)}")
    verified = data.get("faults_verified")
    if not (verified is None or isinstance(verified, bool | dict)):
        raise RunStateError(f"{path}: faults_verified must be true/false or an object of fault name -> bool")
    if isinstance(verified, dict) and not all(isinstance(v, bool) for v in verified.values()):
        raise RunStateError(f"{path}: faults_verified values must be true or false")
    stage_valid: dict[int, bool | str] = {}
    given = data.get("stage_valid") or {}
    if not isinstance(given, dict):
        raise RunStateError(f"{path}: stage_valid must be an object of stage percent -> true or a reason")
    for key, value in given.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 3) or not isinstance(value, bool | str):
            raise RunStateError(f"{path}: stage_valid.{key}: keys are stage percents, values true or a reason")
        stage_valid[int(key)] = value
    removed = data.get("faults_removed_at")
    if removed is not None and _epoch(removed) is None:
        raise RunStateError(f"{path}: faults_removed_at must be epoch seconds")
    windows = _fault_windows(path, data.get("fault_windows") or [])
    recovery = data.get("recovery")
    if recovery is not None and not (isinstance(recovery, dict) and recovery.get("status") in _STATUSES):
        raise RunStateError(f"{path}: recovery must be a check object with a status PASS, FAIL or INCONCLUSIVE")
    return RunState(verified, stage_valid, None if removed is None else _epoch(removed), windows, recovery)


_STATUSES = ("PASS", "FAIL", "INCONCLUSIVE")


def _epoch(value: object) -> float | None:
    """A finite number of seconds, or None (a bool, a string, an integer too large for a float, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _fault_windows(path: str | Path, items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise RunStateError(f"{path}: fault_windows must be a list")
    for index, item in enumerate(items):
        where = f"{path}: fault_windows[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("fault"), str):
            raise RunStateError(f"{where}: expected an object with a fault name")
        watched = item.get("watched_in") or []
        if not isinstance(watched, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in watched):
            raise RunStateError(f"{where}.watched_in: expected a list of stage percents")
        verified = item.get("verified") or []
        if not isinstance(verified, list):
            raise RunStateError(f"{where}.verified: expected a list of {{from, to, stage}}")
        for w, window in enumerate(verified):
            ok = isinstance(window, dict) and _epoch(window.get("from")) is not None
            ok = ok and _epoch(window.get("to")) is not None
            if not ok or window["from"] > window["to"]:
                raise RunStateError(f"{where}.verified[{w}]: expected {{from, to}} epoch seconds with from <= to")
    return items
