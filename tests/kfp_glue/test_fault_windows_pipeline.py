"""Faults run when the experiment file says, and a stage counts as under fault only while the fault was seen
active (issue 11 §1), through the whole pipeline on kfp.local:

- on the loopback Kubernetes API, a fault whose duration runs out mid-ramp (the fake stops it at creation +
  duration, as Chaos Mesh does): the stage it no longer covers is INCONCLUSIVE, naming the fault and the
  uncovered seconds, and the ramp stops there;
- on the local backend (the demo's fault proxy), an http-abort on the middle stage only: the 503s and the
  records' `fault_active` are in that stage and nowhere else.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kfchaos.demo.stack.demostack import DemoStack
from tests.kfp_glue.conftest import kfchaos
from tests.kfp_glue.test_local_pipeline import _env, _kube_env, _repo, _run_command, _run_dir
from tests.support.kubeapi import KubeApiServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SYNTHETIC = (
    "synthetic: {rate: 100, prompt_tokens: {distribution: fixed, mean: 32},"
    " output_tokens: {distribution: fixed, mean: 4}}"
)


def _experiment(tmp_path: Path, fault: str) -> Path:
    root = _repo(tmp_path, SYNTHETIC)
    path = root / "experiments/local-delay.yaml"
    # Replay fidelity is not what these tests are about: on a busy machine a 2 s stage can lag 60 ms, and the
    # gate would stop the ramp before the stage under test.
    text = path.read_text().replace("stages: [10, 30]", "stages: [10, 30, 60]\n    max_send_lag_p99: 1s")
    start = text.index("  faults:\n")
    end = text.index("  slo:\n")
    path.write_text(text[:start] + fault + text[end:])
    return root


def _stages(root: Path) -> dict[int, dict[str, Any]]:
    record = json.loads((_run_dir(root) / "verdict-report" / "audit").read_text())
    return {s["stage"]: s for s in record["steps"] if s["step"] == "stage"}


def _records(root: Path) -> dict[int, Any]:
    """Each stage's Parquet records from the replay tasks' outputs, by stage."""
    out: dict[int, Any] = {}
    for path in _run_dir(root).glob("replay-stage*/requests"):
        table = pq.read_table(path)
        if table.num_rows:
            out[int(table.column("stage")[0].as_py())] = table
    return out


def test_a_fault_that_expires_mid_ramp_makes_the_uncovered_stage_inconclusive(tmp_path: Path, stack: DemoStack) -> None:
    # On every stage, but alive only 6 s from its creation in stage 10's task: it runs out before stage 30
    # or 60 has replayed (each stage is 2 s, and several tasks run between two stages).
    fault = (
        "  faults:\n    - name: delay\n      type: network-delay\n      mode: all\n      duration: 6s\n"
        "      params: {latency: 20ms}\n"
    )
    root = _experiment(tmp_path, fault)
    assert kfchaos("compile", "--root", str(root)).returncode == 0
    with KubeApiServer(inject_delay=0.2) as kube:
        kube.add_pod("demo", "demo-llm-0", {"app": "demo-llm"})
        command = _run_command(root, stack)
        command[command.index(stack.target_url)] = stack.server_url
        done = subprocess.run(command, env=_kube_env(kube), capture_output=True, text=True, timeout=300)
        left = kube.chaos_objects()
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert left == []
    stages = _stages(root)
    uncovered = [
        s for s in stages.values() if any("fault_active: delay not verified active for" in r for r in s["reasons"])
    ]
    assert uncovered, {k: v["reasons"] for k, v in stages.items()}
    first = uncovered[0]
    assert first["stage"] in (30, 60) and first["status"] == "INCONCLUSIVE" and not first["proceed"]
    assert "s of the" in next(r for r in first["reasons"] if "fault_active" in r)
    # The fault was verified while stage 10 replayed, and the verdict says which stage lost it.
    (window,) = stages[10]["detail"]["fault_windows"]
    assert window["verified"] and window["applied_at"] is not None
    check = next(c for c in stages[10]["detail"]["stage"]["checks"] if c["name"] == "fault_active")
    assert check["status"] == "PASS", check
    assert f"stage {first['stage']}%: fault_active: delay not verified active" in done.stdout
    # Requests sent after the fault stopped are not marked as under fault.
    records = _records(root)
    later = records[first["stage"]].column("fault_active").to_pylist()
    assert later.count(False) > 0


def test_a_fault_on_the_middle_stage_runs_in_that_stage_only(tmp_path: Path, stack: DemoStack) -> None:
    fault = (
        "  faults:\n    - name: abort\n      type: http-abort\n      mode: all\n      stages: [30]\n"
        "      params: {port: 8000}\n"
    )
    root = _experiment(tmp_path, fault)
    assert kfchaos("compile", "--root", str(root)).returncode == 0
    done = subprocess.run(_run_command(root, stack), env=_env(stack), capture_output=True, text=True, timeout=300)
    assert done.returncode in (1, 2), done.stdout[-3000:] + done.stderr[-3000:]
    stages = _stages(root)
    assert sorted(s for s, step in stages.items() if step["status"] != "SKIPPED") == [10, 30, 60]
    records = _records(root)
    aborted = {stage: table.column("status").to_pylist().count(503) for stage, table in records.items()}
    marked = {stage: sum(table.column("fault_active").to_pylist()) for stage, table in records.items()}
    assert aborted[10] == 0 and aborted[60] == 0 and aborted[30] > 0, aborted
    assert marked[10] == 0 and marked[60] == 0, marked
    assert marked[30] >= 0.95 * records[30].num_rows, (marked, records[30].num_rows)
    (window,) = stages[30]["detail"]["fault_windows"]
    assert window["stages"] == [30] and window["removed_at"] is not None
    assert stages[10]["detail"]["fault_windows"] == [] and stages[60]["detail"]["fault_windows"] == []
    check = next(c for c in stages[30]["detail"]["stage"]["checks"] if c["name"] == "fault_active")
    assert check["status"] == "PASS", check
    # The run's outputs carry the fault's windows for the report to shade (docs/verdict.md, "Fault windows").
    record = json.loads((_run_dir(root) / "verdict-report" / "audit").read_text())
    (entry,) = record["fault_windows"]
    assert entry["fault"] == "abort" and entry["watched_in"] == [30] and entry["stages"] == [30]
    assert entry["applied_at"] <= entry["verified"][0]["from"] <= entry["verified"][-1]["to"] <= entry["removed_at"]
    assert all(w["stage"] == 30 for w in entry["verified"])
