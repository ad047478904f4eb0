"""A sharded stage through the whole pipeline on kfp.local (issue 15 §4, issue 45 §1): start -> 2 shard tasks ->
merge, inside the ExitHandler, with a fault created by stage 10's start task and removed by the exit handler.

The fan-out is unrolled at compile time (one task per shard, each shard's outputs an input of the merge's own): no
ParallelFor and no dsl.Collected, so KFP 2.1.0 runs it (the real node's test, tests/cluster/node/
test_pipeline_real.py, runs it there and compares its verdict and plans with the unsharded run's). kfp.local runs a
DAG's tasks one at a time (kfp/local/orchestrator/enhanced_dag_orchestrator.py, run_dag: a topological order, one
execute_task after another), so here the second shard starts after the first has replayed its share: far later
than the stage's common start time. It must then send nothing and the stage must be INCONCLUSIVE naming it, never
PASS; that is what this checks, with the compiled IR's shape. "Same plan" (the merged records are exactly the
unsharded plan's) is checked where shards run at once: tests/kfp_glue/test_steps_shards.py and the node's test.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kfchaos.demo.stack.demostack import DemoStack
from tests.kfp_glue.conftest import kfchaos
from tests.kfp_glue.test_local_pipeline import _env, _proxy_faults, _repo, _run_command, _run_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHARDS = 2


def _sharded_repo(tmp_path: Path) -> Path:
    traffic = tmp_path / "traffic.jsonl"
    lines = [
        {"id": f"r{i}", "timestamp": 1_764_680_000 + i * 0.005, "method": "POST", "path": "/v1/completions",
         "body": {"model": "demo/llama-3-8b-sim", "prompt": "hello", "max_tokens": 4}}
        for i in range(600)
    ]  # fmt: skip
    traffic.write_text("".join(json.dumps(line) + "\n" for line in lines))
    root = _repo(tmp_path, f"file: {traffic}\n    format: jsonl", duration="duration: 10m")
    path = root / "experiments/local-delay.yaml"
    extra = f"    shards: {SHARDS}\n    shard_start_lead: 20s\n    max_send_lag_p99: 1s\n"
    path.write_text(path.read_text().replace("    seed: 1\n", "    seed: 1\n" + extra))
    return root


def _tasks(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return tasks


def _producer(argument: dict[str, Any]) -> str:
    task_output = argument.get("taskOutputParameter") or argument.get("taskOutputArtifact") or {}
    return str(task_output.get("producerTask", ""))


def test_a_sharded_stage_compiles_to_plain_tasks_and_under_kfp_local_a_late_shard_makes_it_inconclusive(
    tmp_path: Path, stack: DemoStack
) -> None:
    root = _sharded_repo(tmp_path)
    compiled = kfchaos("compile", "--root", str(root))
    assert compiled.returncode == 0, compiled.stderr
    text = (root / "pipelines/compiled/local-delay/1.0.0.yaml").read_text()
    spec = next(yaml.safe_load_all(text))
    tasks = _tasks(spec)
    # The real compiler's IR: per stage, SHARDS shard tasks and one merge fed by each of them; nothing 2.1.0 refuses.
    assert "parameterIterator" not in text and "isArtifactList" not in text
    shard_tasks = sorted(name for name in tasks if name.startswith("replay-shard"))
    merges = sorted(name for name in tasks if name.startswith("merge-shards"))
    assert len(shard_tasks) == SHARDS * 2 and len(merges) == 2, sorted(tasks)
    fed: list[str] = []
    for merge in merges:
        inputs = tasks[merge]["inputs"]
        results = [_producer(inputs["parameters"][f"result_{i}"]) for i in range(SHARDS)]
        parts = [_producer(inputs["artifacts"][f"part_{i}"]) for i in range(SHARDS)]
        assert results == parts and len(set(results)) == SHARDS, (results, parts)
        assert [tasks[name]["inputs"]["parameters"]["shard"]["runtimeValue"]["constant"] for name in results] == [0, 1]
        fed += results
    assert sorted(fed) == shard_tasks

    done = subprocess.run(_run_command(root, stack), env=_env(stack), capture_output=True, text=True, timeout=420)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert _proxy_faults(stack) == []
    run_dir = _run_dir(root)
    record = json.loads((run_dir / "verdict-report" / "audit").read_text())
    assert record["verdict"]["status"] == "INCONCLUSIVE", record["verdict"]
    stages = {s["stage"]: s for s in record["steps"] if s["step"] == "stage"}
    ran = [(s["step"], s["stage"], s["status"], s["reasons"]) for s in record["steps"]]
    first = stages[10]
    assert first["status"] == "INCONCLUSIVE", ran
    late = [
        reason
        for reason in first["reasons"]
        if re.search(r"shard [01]/2 started .*raise traffic\.shard_start_lead", reason)
    ]
    assert late, ran
    assert stages[30]["status"] == "SKIPPED", ran  # the gate stopped the ramp
