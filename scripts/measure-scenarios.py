#!/usr/bin/env python3
"""Run demo scenarios afresh and read each report's own data: the story its first chart tells (fault, first
error, OOM kill or restart, in time order) and where the scenario's designed cause ranks among the failure
modes. `make scenarios` (every scenario) or `make scenarios SCENARIOS="unsafe batch-shock"`.

Prints one Markdown table row per scenario (docs/report.md keeps the last measurement) and exits 1 when a
scenario does not give its expected verdict, its designed cause ranks below 3rd, or its story puts the first
error before the fault's start.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from kfchaos.demo.runner.scenarios import EXPERIMENTS_DIR, SCENARIOS, ScenarioResult, resolve, run_scenario
from kfchaos.report.page import DATA_ID

TOP = 3


def page_data(report: Path) -> dict[str, Any]:
    found = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', report.read_text(), re.S)
    if found is None:
        raise SystemExit(f"{report}: no {DATA_ID} data block")
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def story(events: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The events relative to the first fault's start, in order, and what is out of order."""
    faults = [e for e in events if e["kind"] == "fault"]
    zero = min((e["earliest"] for e in faults), default=None)
    if zero is None:
        return "no fault event", ["no fault event"]

    def at(event: dict[str, Any]) -> str:
        low, high = event["earliest"], event["latest"]
        if low is None:
            return f"≤ {high - zero:+.1f} s"
        if high is None or abs(high - low) < 0.05:
            return f"{low - zero:+.1f} s"
        return f"{low - zero:+.1f}..{high - zero:+.1f} s"

    ordered = sorted(events, key=lambda e: e["latest"] if e["earliest"] is None else e["earliest"])
    problems = []
    first_error = next((e for e in events if e["kind"] == "first error"), None)
    if first_error is not None and first_error["latest"] is not None and first_error["latest"] < zero:
        problems.append("the first error comes before the fault's start")
    text = "; ".join(f"{e['kind']} {at(e)}" for e in ordered)
    return text, problems


def row(result: ScenarioResult, cause: str | None) -> tuple[str, list[str]]:
    data = page_data(result.run_dir / "report.html")
    text, problems = story(data.get("events") or [])
    ranked = data.get("failure_modes") or []
    if result.status != result.expected:
        problems.append(f"expected {result.expected}, got {result.status}")
    if cause is None:
        rank = "-"
    elif cause in ranked:
        rank = f"{ranked.index(cause) + 1} of {len(ranked)} ({cause})"
        if ranked.index(cause) >= TOP:
            problems.append(f"designed cause {cause} ranks {ranked.index(cause) + 1}, below {TOP}")
    else:
        rank = f"not ranked ({cause})"
        problems.append(f"designed cause {cause} not among the failure modes {ranked}")
    return f"| {result.scenario} | {result.status} | {text} | {rank} | {result.seconds:.0f} s |", problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    every = [*SCENARIOS, *sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.yaml"))]
    parser.add_argument("scenarios", nargs="*", default=every, help="default: every scenario")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where run folders go (default: runs/)")
    parser.add_argument("--baseline-seconds", type=float, default=15.0)
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    rows, failures = [], []
    for name in args.scenarios:
        scenario = resolve(name)
        result = run_scenario(scenario, root, args.runs.resolve(), args.baseline_seconds)
        line, problems = row(result, scenario.cause)
        print(line, flush=True)
        rows.append(line)
        failures += [f"{name}: {p}" for p in problems]
    print("\n| scenario | verdict | the first chart's story (from the first fault's start) | designed cause | time |")
    print("| --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    for failure in failures:
        print(f"measure-scenarios: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
