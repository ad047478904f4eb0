"""A sharded stage through the whole pipeline on kfp.local (issue 15 §4): start -> ParallelFor(2 shard pods) ->
merge, inside the ExitHandler (the shape kubeflow/pipelines#12390 reports failing on some backends), with a fault
created by stage 10's start task, watched by shard 0 and removed by stage 30's merge task.

"Same plan" is checked precisely: for each stage, the merged records' (request id, intended - start time) are
exactly the unsharded plan's (record id, offset); each shard's file holds exactly its hash share of it; and the
plan hash recorded with the merged records is the unsharded plan's hash (so `kfchaos audit verify` agrees).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.traffic.api import plan_stage
from kfchaos.traffic.sampling import shard_of
from kfchaos.validate import load_experiment
from tests.kfp_glue.conftest import kfchaos
from tests.kfp_glue.test_local_pipeline import _env, _proxy_faults, _repo, _run_command, _run_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHARDS = 2  # kfp.local runs at most 2 ParallelFor iterations at once (docs/pipelines.md, "Sharded stages")


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
    # A lead long enough for two shard subprocesses to start on a busy machine; lag tolerance as in the other
    # kfp.local tests (replay fidelity on a loaded CI box is not what this test is about).
    extra = f"    shards: {SHARDS}\n    shard_start_lead: 20s\n    max_send_lag_p99: 1s\n"
    path.write_text(path.read_text().replace("    seed: 1\n", "    seed: 1\n" + extra))
    return root


def _tasks(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return tasks


def test_a_sharded_stage_runs_under_kfp_local_and_its_merged_records_are_the_unsharded_plan(
    tmp_path: Path, stack: DemoStack
) -> None:
    root = _sharded_repo(tmp_path)
    compiled = kfchaos("compile", "--root", str(root))
    assert compiled.returncode == 0, compiled.stderr
    # The real compiler's IR: a ParallelFor over the shard indices inside each stage's If, inside the ExitHandler.
    spec = next(yaml.safe_load_all((root / "pipelines/compiled/local-delay/1.0.0.yaml").read_text()))
    loops = [t for t in _tasks(spec).values() if "parameterIterator" in t]
    assert len(loops) == 2 and all(t["iteratorPolicy"]["parallelismLimit"] == SHARDS for t in loops)
    assert all(json.loads(t["parameterIterator"]["items"]["raw"]) == [0, 1] for t in loops)

    done = subprocess.run(_run_command(root, stack), env=_env(stack), capture_output=True, text=True, timeout=420)
    assert done.returncode in (1, 2), done.stdout[-3000:] + done.stderr[-3000:]
    assert _proxy_faults(stack) == []
    run_dir = _run_dir(root)
    assert (run_dir / "verdict-report" / "audit").is_file(), done.stdout[-6000:] + done.stderr[-3000:]
    record = json.loads((run_dir / "verdict-report" / "audit").read_text())
    stages = {s["stage"]: s for s in record["steps"] if s["step"] == "stage"}
    ran = [(s["step"], s["stage"], s["status"], s["reasons"]) for s in record["steps"]]
    assert sorted(stages) == [10, 30] and all("replay" in s["detail"] for s in stages.values()), ran
    experiment = load_experiment(root / "experiments/local-delay.yaml")
    merged = {
        int(pq.read_table(p).column("stage")[0].as_py()): pq.read_table(p)
        for p in run_dir.glob("merge-shards*/requests")
    }
    for stage, step in stages.items():
        replay = step["detail"]["replay"]
        assert not any("shard" in r for r in step["reasons"]), step["reasons"]
        plan = plan_stage(experiment, stage, base_dir=root / "experiments")
        planned = {p.record_id: p.offset for p in plan.schedule()}
        table = merged[stage]
        start_at = replay["sharding"]["start_at"]
        got = dict(zip(table.column("request_id").to_pylist(), table.column("intended").to_pylist(), strict=True))
        assert set(got) == set(planned) and len(got) == table.num_rows
        assert max(abs((got[k] - start_at) - planned[k]) for k in planned) < 1e-6
        # Each request went out from the shard its id hashes to, and every shard sent its share.
        shards = dict(zip(table.column("request_id").to_pylist(), table.column("shard").to_pylist(), strict=True))
        assert all(shards[k] == shard_of(k, experiment.spec.traffic.seed, SHARDS) for k in planned)
        assert sorted(set(shards.values())) == [0, 1]
        assert step["detail"]["plan_hash"] == replay["plan_hash"] == plan.hash
        per_shard = replay["sharding"]["per_shard"]
        assert [s["shard"] for s in per_shard] == [0, 1] and all(s["sent_share"] for s in per_shard)
        assert len({s["plan_hash"] for s in per_shard} | {plan.hash}) == 3  # each shard's own plan differs
        # The fault: created by stage 10's start task, watched by shard 0 in both stages, removed after stage 30.
        (window,) = step["detail"]["fault_windows"]
        assert window["fault"] == "delay" and window["verified"], window
        assert (window["removed_at"] is not None) == (stage == 30)
        assert sum(table.column("fault_active").to_pylist()) >= 0.95 * table.num_rows
    assert stages[10]["detail"]["chaos_objects"] and not stages[30]["detail"]["chaos_objects"]
    verify = kfchaos("audit", "verify", str(run_dir / "verdict-report" / "audit"), "--root", str(root))
    assert "ok       replay_plans[stage 10]" in verify.stdout and "ok       replay_plans[stage 30]" in verify.stdout
    # The run folder takes the merged records of both stages and re-judges to the pipeline's verdict.
    folder = root / "runs" / run_dir.parent.name  # the run id: its own pipeline root's name
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["rejudged"]["matches"], manifest["rejudged"]
    kept = pq.read_table(folder / "records.parquet")
    assert sorted(set(kept.column("stage").to_pylist())) == [10, 30]
