"""The whole bundle on a real Prometheus holding a backfilled OOM kill and the loopback API server holding the
pod: the trigger read from the run's snapshot, every item collected or said why not, the knowledge base ranked
by what was found, and the run folder and report that show it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kfchaos.evidence import files
from kfchaos.evidence.kube import ClusterKube
from kfchaos.evidence.model import Bundle
from kfchaos.evidence.runbundle import for_run
from kfchaos.knowledge import match
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.report import evidence as section
from tests.metrics.test_oom_live import SAMPLE, Family, steps
from tests.support.kubeapi import KubeApiServer, kubernetes_client
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment

pytestmark = pytest.mark.integration
GIB = 1 << 30
KILL_AT = 300.0  # seconds into the stage
LIMIT = 8 * GIB
# The end of vLLM's log when the kernel killed its engine process (vllm/v1/engine/core_client.py, exceptions.py).
ENGINE_LOG = (
    "INFO Avg prompt throughput: 900 tokens/s\n"
    "WARNING [shutdown] MPClient: engine core exited unexpectedly; starting cleanup\n"
    "ERROR vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above)\n"
)


def history(t0: float, end: float) -> str:
    times = np.arange(t0 - 600, end, SAMPLE, dtype=float)
    kill = t0 + KILL_AT
    c = 'namespace="serving",pod="vllm-0",container="vllm"'
    always = [(float(t), 1.0) for t in times]
    growing = [(float(t), min(7.4 * GIB, 2 * GIB + max(0.0, t - t0) * 0.02 * GIB)) for t in times if t < kill - 10]
    families = [
        Family("kube_pod_container_status_restarts_total", "counter", [(f'{c},uid="u"', steps(times, {kill: 1}))]),
        Family(
            "kube_pod_container_status_last_terminated_reason",
            "gauge",
            [(f'{c},uid="u",reason="OOMKilled"', [p for p in always if p[0] >= kill])],
        ),
        Family(
            "kube_pod_container_resource_limits",
            "gauge",
            [(f'{c},uid="u",resource="memory",unit="byte"', [(t, float(LIMIT)) for t, _ in always])],
        ),
        Family(
            "container_memory_working_set_bytes",
            "gauge",
            [
                (f'{c},id="/kubepods/c1"', growing),
                (f'{c},id="/kubepods/c2"', [(float(t), 1.5 * GIB) for t in times if t >= kill + 15]),
            ],
        ),
        Family(
            "container_oom_events_total",
            "counter",
            [
                (f'{c},id="/kubepods/c1"', steps(times, {}, until=kill - 15)),  # the kill goes with the cgroup
                (f'{c},id="/kubepods/c2"', [p for p in steps(times, {}) if p[0] >= kill + 15]),
            ],
        ),
        Family(
            "vllm:kv_cache_usage_perc",
            "gauge",
            [
                (
                    'namespace="serving",pod="vllm-0",model_name="m"',
                    [(float(t), 1.0 if kill - 60 <= t < kill else 0.3) for t in times],
                ),
            ],
        ),
        Family(
            "vllm:num_preemptions_total",
            "counter",
            [
                (
                    'namespace="serving",pod="vllm-0",model_name="m"',
                    steps(times, {kill - 45: 5, kill - 30: 12}, until=kill),
                ),
            ],
        ),
        # The pod's node, its kernel's OOM kill counter (which counted this kill) and its kubelet's cgroup version.
        Family("kube_pod_info", "gauge", [('namespace="serving",pod="vllm-0",uid="u",node="gpu-node-1"', always)]),
        Family("node_vmstat_oom_kill", "unknown", [('node="gpu-node-1"', steps(times, {0: 4, kill - 5: 5}))]),
        Family("kubelet_cgroup_version", "gauge", [('node="gpu-node-1"', steps(times, {0: 2}))]),
    ]
    return "\n".join([line for f in families for line in f.lines()] + ["# EOF", ""])


@dataclass
class Cluster:
    prometheus: str
    api: KubeApiServer
    t0: float


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    end = int(time.time()) // 3600 * 3600 - 3600
    t0 = float(end - 2 * 3600)
    tmp = tmp_path_factory.mktemp("prom-evidence")
    backfill(tmp / "data", history(t0, end))
    with PrometheusServer(tmp / "data", scrape_interval="15s") as prometheus, KubeApiServer() as api:
        api.add_pod("serving", "vllm-0", {"app": "vllm"}, containers=["vllm"])
        api.write_log("serving", "vllm-0", "vllm", ENGINE_LOG)
        api.restart_container("serving", "vllm-0", "vllm", "OOMKilled", 137)
        yield Cluster(prometheus.url, api, t0)


@pytest.fixture(scope="module")
def bundle(cluster: Cluster) -> Bundle:
    spec = experiment(stages=(10,))
    window = (cluster.t0, cluster.t0 + 600)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PROMETHEUS_ENV, cluster.prometheus)
        metrics = snapshot_for_experiment(spec, window, step=15.0, read_log=lambda *a: None)
    data = for_run(spec, "FAIL", metrics, window, [], kube=(ClusterKube(kubernetes_client(cluster.api.url)), ""),
                   source=(PrometheusClient(cluster.prometheus), ""))  # fmt: skip
    assert data is not None
    found = Bundle.from_dict(data)
    assert found is not None
    return found


def item(bundle: Bundle, kind: str) -> object:
    (one,) = [i for i in bundle.items if i.kind == kind]
    return one


def test_the_trigger_is_the_kill_in_the_runs_series(bundle: Bundle) -> None:
    assert any("1 OOM kill" in t for t in bundle.trigger), bundle.trigger


def test_every_item_is_there_collected_or_with_why_not(bundle: Bundle) -> None:
    kinds = [i.kind for i in bundle.items]
    assert kinds == ["last-state", "events", "previous-log", "memory", "cgroup-oom-events", "node-oom-kills",
                     "gpu-memory", "kv-cache", "nvidia-smi"]  # fmt: skip
    for one in bundle.items:
        assert one.collected or one.why_not, one
        assert one.source, one


def test_the_cgroup_stage_shows_the_working_set_at_the_limit(bundle: Bundle) -> None:
    memory = item(bundle, "memory")
    assert memory.collected, memory.why_not  # type: ignore[attr-defined]
    assert memory.data["limit_bytes"] == pytest.approx(LIMIT, rel=1e-5)  # type: ignore[attr-defined]  # 6 digits
    assert 0.9 <= memory.data["peak_ratio"] <= 0.93  # type: ignore[attr-defined]  # 7.4 of 8 GiB
    assert memory.findings == {"working_set_near_limit": True}  # type: ignore[attr-defined]
    assert "kube_pod_container_resource_limits" in memory.source  # type: ignore[attr-defined]
    last = item(bundle, "last-state")
    assert last.findings["host_oom_kill"] is True  # type: ignore[attr-defined]
    cgroup = item(bundle, "cgroup-oom-events")
    assert cgroup.findings == {"cgroup_oom_events": False}  # type: ignore[attr-defined]
    assert "0 is not proof" in cgroup.shows  # type: ignore[attr-defined]
    # The node's kernel counted the kill its cgroup series lost, and says what a kill takes there.
    node = item(bundle, "node-oom-kills")
    assert node.findings == {"node_oom_kills": True}, node  # type: ignore[attr-defined]
    assert node.data["node"] == "gpu-node-1" and node.data["cgroup_version"] == 2  # type: ignore[attr-defined]
    assert "memory.oom.group" in node.shows  # type: ignore[attr-defined]
    log = item(bundle, "previous-log")
    assert log.findings["engine_death_log"] is True  # type: ignore[attr-defined]
    assert "2 vLLM engine-death line(s)" in log.shows  # type: ignore[attr-defined]


def test_the_gpu_and_allocator_stages(bundle: Bundle) -> None:
    gpu = item(bundle, "gpu-memory")
    assert not gpu.collected and "series absent" in gpu.why_not  # type: ignore[attr-defined]
    assert "exported_pod" in gpu.source  # type: ignore[attr-defined]
    kv = item(bundle, "kv-cache")
    assert kv.findings == {"kv_cache_full": True, "preemptions": True}  # type: ignore[attr-defined]
    assert kv.data["preemptions"] == 12  # type: ignore[attr-defined]
    smi = item(bundle, "nvidia-smi")
    assert not smi.collected and "not opted in" in smi.why_not  # type: ignore[attr-defined]


def test_the_knowledge_base_ranks_by_the_evidence_found(bundle: Bundle) -> None:
    verdict = {"checks": [], "stages": [{"checks": [{"name": "oom_kill_rate", "status": "FAIL"},
                                                    {"name": "p99_drift", "status": "FAIL"}]}]}  # fmt: skip
    ranked = match(verdict, ["network-delay"], bundle.findings())
    ids = [m.mode.id for m in ranked]
    # Confirmed by what was collected (an OOM kill with the working set at the limit, after a preemption storm)
    # first; the mode only guessed from a failing check and the fault type after every confirmed one.
    confirmed = [m.mode.id for m in ranked if m.found]
    assert ids[: len(confirmed)] == confirmed
    assert {"host-cgroup-oom-kill", "cpu-offload-pinned-memory-growth", "kv-cache-preemption-storm"} <= set(confirmed)
    host = ranked[ids.index("host-cgroup-oom-kill")]
    assert {"host_oom_kill", "working_set_near_limit"} <= set(host.found)
    assert "cgroup_oom_events" in host.not_seen and host.not_collected == []
    assert "latency-bound-collective" not in confirmed
    # Without the bundle the fault type alone would have put the network mode first.
    # Without the bundle the failing checks decide, the injected fault counting as one more (knowledge.rank): the
    # mode both checks point at (the OOM kill among them) ties the network mode and covers more of its checks.
    guessed = match(verdict, ["network-delay"], None)
    assert [m.mode.id for m in guessed[:2]] == ["kv-cache-growth-long-context", "latency-bound-collective"]
    assert [m.mode.id for m in guessed] != ids  # what the bundle found reordered them
    assert all(m.not_collected == m.mode.signals for m in guessed)


def test_the_run_folder_and_report_show_it(bundle: Bundle, tmp_path: Path) -> None:
    files.write(bundle, tmp_path)
    written = sorted(p.name for p in (tmp_path / "evidence").iterdir())
    assert "index.json" in written and "previous-log-serving_vllm-0_vllm.log" in written
    again = files.read(tmp_path / "evidence")
    assert again is not None and again.findings() == bundle.findings()
    text = "\n".join(section.markdown({"evidence": again}))
    assert "## OOM evidence" in text and "not collected: series absent" in text
    assert "reason OOMKilled, exit code 137" in text
    page = section.html({"evidence": again})
    assert "Avg prompt throughput" in page  # the log tail, inline


def test_a_pass_collects_nothing(cluster: Cluster) -> None:
    assert for_run(experiment(stages=(10,)), "PASS", None, (cluster.t0, cluster.t0 + 600), ["oom_kill_rate"]) is None


def test_an_unreachable_source_is_said_per_item_and_never_raises(cluster: Cluster) -> None:
    data = for_run(experiment(stages=(10,)), "INCONCLUSIVE", None, (cluster.t0, cluster.t0 + 600), ["oom_kill_rate"],
                   kube=(ClusterKube(kubernetes_client(cluster.api.url)), ""),
                   source=(PrometheusClient("http://127.0.0.1:9", timeout=0.5, retries=0), ""))  # fmt: skip
    found = Bundle.from_dict(data)
    assert found is not None
    assert any("restarts unreadable" in n for n in found.notes)
    memory_free = [i for i in found.items if i.kind in ("kv-cache", "gpu-memory")]
    assert memory_free and all(not i.collected and "Unreachable" in (i.why_not or "") for i in memory_free)
    assert [i.kind for i in found.items if i.collected] == ["events"]  # the pod found by the target's selector
