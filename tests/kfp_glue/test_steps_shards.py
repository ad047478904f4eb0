"""The sharded-stage steps (kfchaos.steps.shards) called as the components call them, against the demo server:
a shard that starts far too late sends nothing (no catch-up burst) and the stage is INCONCLUSIVE, never PASS."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from kubernetes.client import CustomObjectsApi

from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.doctor import kfpcheck
from kfchaos.kfp.compile import compile_bytes
from kfchaos.kfp.pipelines.chaos_experiment import PipelineDefaults, build_pipeline
from kfchaos.steps import shards, stages
from tests.faults.conftest import kubernetes_client
from tests.support.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration

EXPERIMENT = """\
apiVersion: kfchaos.io/v1alpha1
kind: Experiment
metadata: {name: sharded, version: 1.0.0, owner: test}
spec:
  target:
    namespace: demo
    selector: {labels: {app: demo-llm}}
    endpoint: TARGET
    api: openai-completions
    model: demo/llama-3-8b-sim
    timeout: 5s
  traffic:
    synthetic: {rate: 60, prompt_tokens: {distribution: fixed, mean: 16}, output_tokens: {distribution: fixed, mean: 2}}
    stages: [10]
    stage_duration: 1s
    seed: 3
    shards: 2
    shard_start_lead: 1s
    max_send_lag_p99: 200ms
  faults: []
  slo: {p99_max: 2s, min_samples: 1}
  baseline: {file: none.yaml}
"""


def test_a_shard_far_too_late_sends_nothing_and_the_stage_is_inconclusive(tmp_path: Path, stack: DemoStack) -> None:
    text = EXPERIMENT.replace("TARGET", stack.server_url)
    start = shards.start(text, str(tmp_path), "run-1", 10, 2)
    begun = json.loads(start)
    assert begun["start_at"] > time.time() and begun["stage_plan_hash"].startswith("sha256:")
    paths = [str(tmp_path / f"s{i}.parquet") for i in range(2)]
    on_time = shards.replay_shard(text, str(tmp_path), "", "run-1", 10, 1, 2, start, paths[1])
    # Shard 0 arrives after shard 1 has sent its share: far more than max_send_lag_p99 late.
    time.sleep(max(0.0, begun["start_at"] + 0.5 - time.time()))
    late = shards.replay_shard(text, str(tmp_path), "", "run-1", 10, 0, 2, start, paths[0])
    assert json.loads(on_time)["sent_share"] and not json.loads(late)["sent_share"]
    assert json.loads(late)["late_by"] >= 0.5 and pq.read_table(paths[0]).num_rows == 0
    merged_path = str(tmp_path / "merged.parquet")
    merged = json.loads(shards.merge(text, str(tmp_path), "run-1", 10, 2, start, [late, on_time], paths, merged_path))
    assert merged["plan_hash"] == begun["stage_plan_hash"]
    assert pq.read_table(merged_path).column("shard").unique().to_pylist() == [1]
    (reason,) = merged["replay_reasons"]
    assert reason.startswith("shard 0/2 started") and "its share of the plan was not sent" in reason
    result = json.loads(stages.collect(text, 10, json.dumps(merged), "", merged_path)[0])
    assert result["status"] == "INCONCLUSIVE" and not result["proceed"], result
    assert reason in result["reasons"]


def test_missing_or_repeated_shards_and_another_plan_are_named() -> None:
    begun = {"stage_plan_hash": "sha256:a"}
    ok = {"stage_plan_hash": "sha256:a", "sent_share": True}
    problems = shards.shard_problems([{**ok, "shard": 0}, {**ok, "shard": 0}], 3, begun, 0.05)
    assert problems == [
        "shards [1, 2] of 3 left no results: the stage's plan was not sent in full",
        "shard indices [0] ran more than once or are not in 0..2",
    ]
    other = shards.shard_problems([{**ok, "shard": 0, "stage_plan_hash": "sha256:b"}], 1, begun, 0.05)
    assert other == ["shard 0/1 planned another stage (plan hash sha256:b)"]
    assert shards.shard_problems([{**ok, "shard": 0}, {**ok, "shard": 1}], 2, begun, 0.05) == []


def test_a_sharded_pipeline_asks_no_more_of_the_backend_than_an_unsharded_one() -> None:
    """The fan-out is unrolled at compile time (issue 45): no ParallelFor, no dsl.Collected, so doctor finds the
    same backend requirements for 3 shards as for 1, and nothing in the IR that KFP 2.1.0 refuses."""

    def compiled(shards: int) -> str:
        defaults = PipelineDefaults(name="sharded", version="1.0.0", description="", stages=(10, 30), shards=shards)
        return compile_bytes(build_pipeline(defaults)).decode()

    one, three = compiled(1), compiled(3)
    assert "parameterIterator" not in three and "isArtifactList" not in three
    assert kfpcheck.requirements(yaml.safe_load_all(three)) == kfpcheck.requirements(yaml.safe_load_all(one))
    assert kfpcheck.PARALLEL_FOR not in kfpcheck.requirements(yaml.safe_load_all(three))
    # A ParallelFor (the tune sweep's loop) is still asked a backend of 2.17 (kubeflow/pipelines#13321).
    loop = {"dag": {"tasks": {"chaos-experiment": {"parameterIterator": {"items": {"raw": "[0, 1]"}}}}}}
    sweep = [{"root": {"dag": {"tasks": {}}}, "components": {"comp-for-loop-2": loop}}]
    assert kfpcheck.PARALLEL_FOR in kfpcheck.requirements(sweep)
    assert kfpcheck.missing((2, 15, 0), [kfpcheck.PARALLEL_FOR]) == [kfpcheck.PARALLEL_FOR]
    assert kfpcheck.missing((2, 17, 0), [kfpcheck.PARALLEL_FOR]) == []
    tasks = next(yaml.safe_load_all(three))["components"]
    assert "comp-merge-shards" in tasks and "comp-replay-shard" in tasks
    merge_inputs = tasks["comp-merge-shards"]["inputDefinitions"]
    assert sorted(merge_inputs["artifacts"]) == ["part_0", "part_1", "part_2"]
    assert {"result_0", "result_1", "result_2"} <= set(merge_inputs["parameters"])


def test_a_foreign_chaos_object_in_a_sharded_stage_makes_it_inconclusive_naming_it(
    tmp_path: Path, stack: DemoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard 0 watches the target for foreign interference as the single replay task does (kfchaos.faults.foreign):
    a PodChaos that no run of kfchaos made, reaching the target's pods, makes the merged stage INCONCLUSIVE."""
    text = EXPERIMENT.replace("TARGET", stack.server_url).replace("stages: [10]", "stages: [10, 30]")
    text = text.replace(
        "faults: []", "faults: [{name: delay, type: network-delay, mode: all, stages: [30], params: {latency: 5ms}}]"
    ).replace("baseline: {file: none.yaml}", "baseline: {file: none.yaml}\n  safety: {max_pod_percent: 100%}")
    with KubeApiServer() as kube:
        kube.add_pod("demo", "demo-llm-0", {"app": "demo-llm"})
        monkeypatch.setenv("KFCHAOS_KUBE_HOST", kube.url)
        monkeypatch.delenv("KFCHAOS_FAULT_BACKEND", raising=False)
        by_hand = {
            "apiVersion": "chaos-mesh.org/v1alpha1", "kind": "PodChaos",
            "metadata": {"name": "by-hand", "namespace": "demo"},
            "spec": {"action": "pod-failure", "mode": "one", "duration": "10m",
                     "selector": {"labelSelectors": {"app": "demo-llm"}}},
        }  # fmt: skip
        CustomObjectsApi(kubernetes_client(kube.url)).create_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", "demo", "podchaos", by_hand
        )
        start = shards.start(text, str(tmp_path), "run-1", 10, 2)
        paths = [str(tmp_path / f"s{i}.parquet") for i in range(2)]
        with ThreadPoolExecutor(2) as pool:  # the two shards' pods, at once
            results = list(pool.map(
                lambda i: shards.replay_shard(text, str(tmp_path), "", "run-1", 10, i, 2, start, paths[i]), (0, 1)
            ))  # fmt: skip
        assert all(json.loads(r)["sent_share"] for r in results), results
        merged_path = str(tmp_path / "merged.parquet")
        merged = shards.merge(text, str(tmp_path), "run-1", 10, 2, start, results, paths, merged_path)
    result = json.loads(stages.collect(text, 10, merged, "", merged_path)[0])
    assert result["status"] == "INCONCLUSIVE" and not result["proceed"], result
    assert any("foreign interference: PodChaos demo/by-hand (pod-failure), not made by kfchaos" in r
               for r in result["reasons"]), result["reasons"]  # fmt: skip
