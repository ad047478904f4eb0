"""Facts about a run that the records cannot tell: which faults were verified injected, which stages the
replayer marked invalid, when the faults were removed. The pipeline writes them as JSON:

    {"faults_verified": {"pod-kill": true}, "stage_valid": {"10": true, "30": "send lag 80ms"},
     "faults_removed_at": 1764000000.0, "fault_windows": [...]}

`fault_windows` is the run-level list of the pipeline's verdict document and audit record (docs/verdict.md,
"Fault windows"): with it, each stage is judged on the time its faults were verified active.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfchaos.errors import KfchaosError


class RunStateError(KfchaosError):
    pass


@dataclass(frozen=True)
class RunState:
    faults_verified: bool | dict[str, bool] | None = None
    stage_valid: dict[int, bool | str] = field(default_factory=dict)
    faults_removed_at: float | None = None
    fault_windows: list[dict[str, Any]] = field(default_factory=list)


def load_run_state(path: str | Path) -> RunState:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise RunStateError(f"{path}: cannot read run state: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise RunStateError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise RunStateError(f"{path}: expected a JSON object")
    unknown = sorted(set(data) - {"faults_verified", "stage_valid", "faults_removed_at", "fault_windows"})
    if unknown:
        raise RunStateError(f"{path}: unknown field(s) {', '.join(unknown)}")
    verified = data.get("faults_verified")
    if not (verified is None or isinstance(verified, bool | dict)):
        raise RunStateError(f"{path}: faults_verified must be true/false or an object of fault name -> bool")
    if isinstance(verified, dict) and not all(isinstance(v, bool) for v in verified.values()):
        raise RunStateError(f"{path}: faults_verified values must be true or false")
    stage_valid: dict[int, bool | str] = {}
    for key, value in (data.get("stage_valid") or {}).items():
        if not str(key).isdigit() or not isinstance(value, bool | str):
            raise RunStateError(f"{path}: stage_valid.{key}: keys are stage percents, values true or a reason")
        stage_valid[int(key)] = value
    removed = data.get("faults_removed_at")
    if removed is not None and (isinstance(removed, bool) or not isinstance(removed, int | float)):
        raise RunStateError(f"{path}: faults_removed_at must be epoch seconds")
    windows = _fault_windows(path, data.get("fault_windows") or [])
    return RunState(verified, stage_valid, None if removed is None else float(removed), windows)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
            ok = isinstance(window, dict) and _number(window.get("from")) and _number(window.get("to"))
            if not ok or window["from"] > window["to"]:
                raise RunStateError(f"{where}.verified[{w}]: expected {{from, to}} epoch seconds with from <= to")
    return items
