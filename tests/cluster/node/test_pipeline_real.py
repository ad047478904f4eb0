"""A compiled pipeline run end to end on the local cluster's real node (issue 30): `kfchaos compile`, `upload` and
`run --wait` against KFP 2.1.0's API server, executed by Argo's controller, KFP's driver and launcher in real pods
on a kubelet with containerd, faults injected by Chaos Mesh's controller and chaos-daemon into the demo LLM
server's containers, the verdict read back from the run's object store. Each test asserts the verdict and the
exit code, not only that the run ended.

One experiment, two versions of its pipeline: a light CPU stress the target holds (PASS, exit 0), and a bandwidth
limit on the target's answers that it cannot serve through (FAIL, exit 1). They share one baseline: the history
Prometheus holds of the target (`baseline capture`) and a fault-free control replay (`baseline control`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kfp
import pytest
import yaml

from kfchaos.kfp.follow import ArtifactStore
from kfchaos.kfp.objectstore import DEFAULT_PIPELINE_ROOT, ObjectStore
from tests.cluster.node.conftest import (
    TARGET_NAMESPACE,
    NodeCluster,
    Target,
    baseline_section,
    eventually,
    experiment_text,
    kfchaos,
    make_baseline,
    run_compiled,
    scratch_root,
)

pytestmark = [pytest.mark.cluster, pytest.mark.node]

NAME = "node-e2e"


def experiment(version: str, fault: dict[str, Any], prometheus: str, *, shards: int = 1) -> str:
    """At 20 req/s, 40 s stages at 50 and 100 %: 400 and 800 requests, enough for every check to PASS with an
    error rate limit of 1 % (kfchaos validate says so). `shards`: replay pods per stage (spec.traffic.shards)."""
    traffic: dict[str, Any] = {
        "synthetic": {
            "rate": 20,
            "prompt_tokens": {"distribution": "lognormal", "mean": 300, "stddev": 100},
            "output_tokens": {"distribution": "fixed", "mean": 16},
        },
        "stages": [50, 100],
        "stage_duration": "40s",
        "warmup": "5s",
    }
    if shards > 1:
        traffic["shards"] = shards
    baseline = baseline_section(NAME, prometheus)
    slo = {"p99_drift_max": "100%", "p99_max": "5s", "error_rate_max": "1%"}
    return experiment_text(NAME, TARGET_NAMESPACE, [fault], traffic, slo, version=version, baseline=baseline)


CPU_STRESS = {"name": "cpu-burn", "type": "stress-cpu", "mode": "all", "params": {"workers": 1, "load": 10}}
# The target's answers squeezed through a real tbf qdisc on its pods' interface (chaos-daemon's tc in their network
# namespace): 20 answers a second of a few hundred bytes each do not fit in 1 kB/s, so they time out.
THROTTLE = {
    "name": "throttle",
    "type": "network-bandwidth",
    "mode": "all",
    "params": {"rate": "8kbps", "limit": 2000, "buffer": 2000},
}


@pytest.fixture(scope="module")
def e2e_root(node_cluster: NodeCluster, llm_target: Target, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scratch repository with the experiment (PASS version) and its baseline."""
    prometheus = node_cluster.values["KFCHAOS_CLUSTER_PROMETHEUS"]
    root = scratch_root(tmp_path_factory.mktemp("e2e"), {f"{NAME}.yaml": experiment("1.0.0", CPU_STRESS, prometheus)})
    make_baseline(node_cluster, llm_target, root / "experiments" / f"{NAME}.yaml")
    return root


def _run(node: NodeCluster, root: Path, version: str, fault: dict[str, Any], *, shards: int = 1) -> Any:
    exp = root / "experiments" / f"{NAME}.yaml"
    exp.write_text(experiment(version, fault, node.values["KFCHAOS_CLUSTER_PROMETHEUS"], shards=shards))
    return run_compiled(node, root, NAME)


def _audit(node: NodeCluster, done: Any) -> dict[str, Any]:
    """The run's audit record, read from its object store as `kfchaos run --artifact-store` reads it."""
    run_id = next(line.split()[-1] for line in done.stdout.splitlines() if line.startswith("submitted run "))
    keys = node.values["KFCHAOS_ARTIFACT_ACCESS_KEY"], node.values["KFCHAOS_ARTIFACT_SECRET_KEY"]
    store = ObjectStore(node.values["KFCHAOS_ARTIFACT_STORE"], *keys)
    return ArtifactStore(store, node.values.get("KFCHAOS_PIPELINE_ROOT", DEFAULT_PIPELINE_ROOT), NAME).audit(run_id)


def test_a_target_that_holds_under_a_real_cpu_stress_passes_with_exit_0(
    node_cluster: NodeCluster, e2e_root: Path
) -> None:
    done = _run(node_cluster, e2e_root, "1.0.0", CPU_STRESS)
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:]
    assert last.startswith("PASS:") and "SUCCEEDED" in last, last
    # Every step ran as a real task of the run, the verdict's among them.
    for task in ("preflight", "replay-stage", "collect-metrics", "remove-faults", "verdict-report", "cleanup"):
        assert f"task {task}: SUCCEEDED" in done.stdout


@pytest.mark.node_long
def test_a_target_throttled_by_a_real_bandwidth_limit_fails_with_exit_1(
    node_cluster: NodeCluster, e2e_root: Path
) -> None:
    done = _run(node_cluster, e2e_root, "1.1.0", THROTTLE)
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout[-3000:]
    assert last.startswith("FAIL:"), last
    assert "error_rate" in last or "timeout_rate" in last, last


@pytest.mark.node_long
def test_a_nightly_recurring_run_fires_through_the_scheduledworkflow_controller_and_its_verdict_reads_back(
    node_cluster: NodeCluster, e2e_root: Path
) -> None:
    """`kfchaos schedule sync` with a cron firing every minute: KFP's ScheduledWorkflow controller starts a run of
    the locked version, which runs to its verdict like any other; `kfchaos run --attach` reads it (PASS, exit 0).
    The schedule is removed as soon as it has fired once."""

    exp = e2e_root / "experiments" / f"{NAME}.yaml"
    exp.write_text(experiment("1.2.0", CPU_STRESS, node_cluster.values["KFCHAOS_CLUSTER_PROMETHEUS"]))
    assert kfchaos(node_cluster, "compile", "--root", str(e2e_root)).returncode == 0
    assert (
        kfchaos(node_cluster, "upload", NAME, "--host", node_cluster.kfp_host, "--root", str(e2e_root)).returncode == 0
    )
    schedules = e2e_root / "schedules.yaml"
    nightly = {"experiment": "kfchaos-nightly-e2e", "service_account": "kfchaos-runner"}
    fires = {"name": f"{NAME}-nightly", "pipeline": NAME, "cron": "0 * * * * *"}  # second 0 of every minute
    schedules.write_text(yaml.safe_dump({**nightly, "schedules": [fires]}))
    sync = ("schedule", "sync", str(schedules), "--root", str(e2e_root), "--host", node_cluster.kfp_host)
    assert kfchaos(node_cluster, *sync).returncode == 0
    client = kfp.Client(host=node_cluster.kfp_host)
    experiment_id = client.get_experiment(experiment_name=nightly["experiment"]).experiment_id

    def fired() -> str:
        runs = client.list_runs(experiment_id=experiment_id, page_size=10).runs or []
        return str(runs[0].run_id) if runs else ""

    try:
        run_id = eventually("the recurring run to fire", fired, timeout=150, every=5)
    finally:
        schedules.write_text(yaml.safe_dump({**nightly, "schedules": []}))
        assert kfchaos(node_cluster, *sync).returncode == 0
    done = kfchaos(
        node_cluster,
        "run",
        str(exp),
        "--root",
        str(e2e_root),
        "--host",
        node_cluster.kfp_host,
        "--attach",
        run_id,
        "--wait-timeout",
        "25m",
        "--poll",
        "5s",
        "--artifact-store",
        node_cluster.values["KFCHAOS_ARTIFACT_STORE"],
        timeout=1800,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:]
    assert last.startswith("PASS:") and run_id in last, last


@pytest.mark.node_long
def test_a_stage_sharded_over_two_real_pods_gets_the_unsharded_verdict_on_the_same_plan(
    node_cluster: NodeCluster, e2e_root: Path
) -> None:
    """Issue 45: on KFP 2.1.0, each stage's replay fanned out over two shard pods (one task each, no ParallelFor, no
    dsl.Collected) and merged; the verdict equals the unsharded run's of the same traffic, and each stage's plan
    hash, which covers every request's identity and offset, is the unsharded plan's."""
    unsharded = _run(node_cluster, e2e_root, "1.3.0", CPU_STRESS)
    sharded = _run(node_cluster, e2e_root, "1.4.0", CPU_STRESS, shards=2)
    assert unsharded.returncode == 0, unsharded.stdout[-3000:]
    assert unsharded.stdout.strip().splitlines()[-1].startswith("PASS:"), unsharded.stdout[-3000:]
    # Two stages, two shard pods each, every one a real task of the run; one merge a stage; and a verdict (before the
    # history was packed, this run's verdict task could not start: "argument list too long").
    # (`kfchaos run` prints each Argo node: a task's driver and executor pods are listed beside it.)
    tasks = [line for line in sharded.stdout.splitlines() if line.startswith("task ") and "-driver:" not in line]
    shard_tasks = [line for line in tasks if line.startswith("task replay-shard")]
    assert len(shard_tasks) == 4 and all(line.endswith(": SUCCEEDED") for line in shard_tasks), sharded.stdout
    assert len([line for line in tasks if line.startswith("task merge-shards")]) == 2, sharded.stdout
    assert not any(line.startswith("task replay-stage") for line in tasks), sharded.stdout
    assert "task verdict-report: SUCCEEDED" in sharded.stdout, sharded.stdout[-3000:]
    one, many = _audit(node_cluster, unsharded), _audit(node_cluster, sharded)
    # The same requests at the same offsets: each stage's plan hash is the unsharded plan's.
    assert [p["plan_hash"] for p in many["replay_plans"]] == [p["plan_hash"] for p in one["replay_plans"]]
    assert len(many["replay_plans"]) == 2 and all(p["plan_hash"] for p in many["replay_plans"])
    stages = [step for step in many["steps"] if step["step"] == "stage"]
    for step in stages:
        sharding = step["detail"]["replay"]["sharding"]
        assert [s["shard"] for s in sharding["per_shard"]] == [0, 1] and all(
            s["sent_share"] for s in sharding["per_shard"]
        ), sharding
        assert not any("shard" in reason for reason in step["reasons"]), step["reasons"]
    # Seen before the fault's default duration counted the shards' start lead (kfchaos.faults.safety.fault_duration):
    # the CPU stress created in stage 50 ended 9.7 s into stage 100's replay, which was INCONCLUSIVE on fault_active.
    assert many["verdict"]["status"] == one["verdict"]["status"] == "PASS"
