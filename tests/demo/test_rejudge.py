"""Issue 25 class 11: `kfchaos verdict --run DIR` on a demo's run folder gives the demo's own verdict, check by
check. The demo's pipeline verified its fault per stage and measured recovery with a probe after the ramp; the
folder must carry both (run-state.json), else re-judging says "not verified (no run state)" and "no records after
the faults were removed" although the run PASSed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kfchaos.demo.runner.scenarios import main
from kfchaos.rundir import kfpimport, layout
from kfchaos.verdict.files import build_from_files
from tests.demo.test_scenarios import SMALL, _write
from tests.kfp_glue.conftest import copy_sources

# The test scenario, loose enough to PASS on any machine, with a recovery limit so that recovery is judged.
PASSING = (
    SMALL.replace("EXPECT", "PASS")
    .replace("p99_max: 1ms", "p99_max: 20s\n    error_rate_max: 50%\n    timeout_rate_max: 50%\n    recovery_max: 60s")
    .replace("a 1 ms P99 no server meets", "a loose SLO every server meets")
    .replace("synthetic: {rate: 40,", "synthetic: {rate: 160,")
    .replace("stage_duration: 3s", "stage_duration: 5s")
    .replace("  slo:\n", "  slo:\n    p99_drift_max: 100%\n")
)


def _checks(verdict: dict[str, Any]) -> list[tuple[str, str, str]]:
    out = [("run", c["name"], c["status"]) for c in verdict["checks"] if c["name"] != "baseline"]
    for stage in verdict["stages"]:
        out += [(str(stage["stage"]), "stage", stage["status"])]
    return sorted(out)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the demo needs Prometheus (`make prometheus`)")
def test_rejudging_a_demo_run_folder_gives_the_demos_verdict(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    _write(scenarios, "tiny-delay", PASSING)
    root = copy_sources(tmp_path / "repo")
    main(["tiny-delay"], root, tmp_path / "runs", baseline_seconds=5.0, directory=scenarios)
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("tiny-delay-")]
    run = layout.open_run(folder)
    written = run.verdict()
    assert written["status"] == "PASS", written["reasons"]
    state = json.loads(run.file(layout.RUN_STATE).read_text())
    assert state["faults_verified"] == {"delay": True} and state["recovery"]["status"] == "PASS"
    again = build_from_files(
        experiment=run.file(layout.EXPERIMENT),
        records=run.file(layout.RECORDS),
        baseline=run.file(layout.BASELINE) if run.has(layout.BASELINE) else None,
        metrics=run.file(layout.METRICS) if run.has(layout.METRICS) else None,
        run_state=run.file(layout.RUN_STATE),
    ).to_dict()
    assert again["status"] == written["status"], again["reasons"]
    assert run.manifest()["rejudged"] == {"status": "PASS", "matches": True}
    rejudged = {(name, status) for where, name, status in _checks(again) if where == "run"}
    assert ("faults_injected", "PASS") in rejudged and ("recovery", "PASS") in rejudged
    assert [s["status"] for s in again["stages"]] == [s["status"] for s in written["stages"]]


def test_the_run_state_of_a_pipeline_carries_the_stages_fault_verification_and_the_recovery_probe() -> None:
    obj = {"fault": "delay", "name": "delay-1", "injection": {"injected": True}}
    failed = {"fault": "kill", "name": "kill-1", "injection": {"injected": False, "error": "timed out"}}
    recovery = {"name": "recovery", "status": "PASS", "reason": "SLOs held again 0s after removal", "value": 0.0}
    audit = {
        "steps": [
            {"step": "stage", "stage": 50, "status": "PASS", "detail": {"chaos_objects": [obj, failed]}},
            {"step": "stage", "stage": 100, "status": "PASS", "detail": {"chaos_objects": [obj]}},
        ],
        "recovery": {"removed_at": 5.0, "recovery": recovery},
    }
    state = kfpimport.run_state_from_pipeline(audit)
    assert state["faults_verified"] == {"delay": True, "kill": False}
    assert state["recovery"] == recovery and state["faults_removed_at"] == 5.0
