"""Faults inject into real containers on the real node and the verdict sees them (issue 30).

Each case runs a one-stage experiment with `kfchaos run --local` (the compiled pipeline's steps on this machine,
faults through the real Chaos Mesh controller and chaos-daemon, metrics from the cluster's Prometheus) against the
demo LLM server on the real node, and checks two things: what the fault did to the target, seen from the cluster
itself (a pod replaced, a container restarted, a stressor in the container's cgroup, answers that stop coming),
and what the verdict made of it. A fault this kernel cannot inject (netem: no sch_netem here) ends INCONCLUSIVE
with Chaos Mesh's own error in the reasons, never PASS.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from localcluster import node

from tests.cluster.node.conftest import (
    NodeCluster,
    Target,
    baseline_section,
    deploy_target,
    eventually,
    experiment_text,
    kfchaos,
    make_baseline,
    scratch_root,
)

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.node_long]

NAMESPACE = "llm-faults"
SELECTOR = "app.kubernetes.io/name=vllm"


NAME = "node-faults"


def experiment(fault: dict[str, Any], prometheus: str, rate: int = 10) -> str:
    """One experiment name for every case, so they share one baseline (its name must match); only the fault
    differs."""
    traffic = {
        "synthetic": {
            "rate": rate,
            "prompt_tokens": {"distribution": "fixed", "mean": 200},
            "output_tokens": {"distribution": "fixed", "mean": 8},
        },
        "stages": [100],
        # 40 s at 10 req/s: 400 requests, over the 368 that showing a 1 % rate with no events needs (the verdict's
        # precision rule, docs/verdict-statistics.md); fewer and every run is INCONCLUSIVE, whatever the fault did.
        "stage_duration": "40s",
        "warmup": "2s",
    }
    # Drift up to 100 %: at 400 requests a 15 % limit leaves the interval of a few slow answers straddling its 1 %
    # (an honest INCONCLUSIVE, seen here); these cases judge what the fault does, not a fine drift.
    slo = {"p99_drift_max": "100%", "p99_max": "5s", "error_rate_max": "2%"}
    baseline = baseline_section(NAME, prometheus)
    return experiment_text(NAME, NAMESPACE, [fault], traffic, slo, timeout="5s", baseline=baseline)


@dataclass
class Watch:
    """Samples a condition on the cluster every half second while the run goes on."""

    check: Callable[[], bool]
    seen: bool = False
    stop: bool = False

    def run(self) -> None:
        while not self.stop and not self.seen:
            with contextlib.suppress(Exception):  # a pod being replaced answers 404 for a moment
                self.seen = bool(self.check())
            time.sleep(0.5)


@pytest.fixture(scope="module")
def fault_target(node_cluster: NodeCluster) -> Iterator[Target]:
    core = k8s.CoreV1Api(node_cluster.cluster.api_client())
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
    try:
        yield deploy_target(node_cluster, namespace=NAMESPACE, replicas=2)
    finally:
        core.delete_namespace(NAMESPACE)


@dataclass(frozen=True)
class Scene:
    root: Path  # the scratch repository: experiments/exp.yaml and its baseline
    target: Target


@pytest.fixture(scope="module")
def faults_root(node_cluster: NodeCluster, fault_target: Target, tmp_path_factory: pytest.TempPathFactory) -> Scene:
    """The scratch repository every case runs from, with the experiment's baseline (capture and control), so the
    drift check is judged, not INCONCLUSIVE for want of a baseline."""
    prometheus = node_cluster.values["KFCHAOS_CLUSTER_PROMETHEUS"]
    first = {"name": "kill", "type": "pod-kill", "mode": "one"}
    root = scratch_root(tmp_path_factory.mktemp("faults"), {"exp.yaml": experiment(first, prometheus)})
    make_baseline(node_cluster, fault_target, root / "experiments" / "exp.yaml")
    return Scene(root, fault_target)


def _pods(core: k8s.CoreV1Api) -> list[Any]:
    return [
        p for p in core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items if p.status.phase == "Running"
    ]


def _cgroup_commands(pod: Any) -> set[str]:
    """The commands of every process in the pod's cpu cgroups on the node (its containers' and what joined them):
    the kubelet's cgroupfs layout, <cgroupRoot>/kubepods/<qos>/pod<uid>/<container>."""
    found = set()
    root = Path("/sys/fs/cgroup/cpu")
    for procs_file in root.glob(f"kfchaos-*/kubepods/**/pod{pod.metadata.uid}/**/cgroup.procs"):
        for pid in procs_file.read_text().split():
            with contextlib.suppress(OSError):
                found.add(Path(f"/proc/{pid}/comm").read_text().strip())
    return found


def _run_local(
    node_cluster: NodeCluster, scene: Scene, tmp: Path, fault: dict[str, Any], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`kfchaos run --local` of the experiment with `fault` against the node's target; run folders under `tmp`."""
    root = scene.root
    (root / "experiments" / "exp.yaml").write_text(experiment(fault, node_cluster.values["KFCHAOS_CLUSTER_PROMETHEUS"]))
    return kfchaos(
        node_cluster,
        "run",
        str(root / "experiments" / "exp.yaml"),
        "--local",
        "--root",
        str(root),
        "--target",
        scene.target.url,
        "--output",
        str(tmp / "pipeline-root"),
        "--runs",
        str(tmp / "runs"),
        extra_env={"KFCHAOS_PROMETHEUS_URL": node_cluster.cluster.prometheus_url, **(env or {})},
        timeout=900,
    )


def _run(node_cluster: NodeCluster, scene: Scene, tmp: Path, fault: dict[str, Any], watch: Watch) -> dict[str, Any]:
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        done = _run_local(node_cluster, scene, tmp, fault)
    finally:
        watch.stop = True
        thread.join(5)
    verdicts = list((tmp / "runs").glob("*/verdict.json"))
    assert verdicts, done.stdout[-3000:] + done.stderr[-2000:]
    verdict: dict[str, Any] = json.loads(verdicts[0].read_text())
    verdict["exit_code"] = done.returncode
    return verdict


def _reasons(verdict: dict[str, Any]) -> str:
    return " ".join(verdict.get("reasons") or [])


def test_pod_kill_replaces_a_real_pod(node_cluster: NodeCluster, faults_root: Scene, tmp_path: Path) -> None:
    core = k8s.CoreV1Api(node_cluster.cluster.api_client())
    before = {p.metadata.uid for p in _pods(core)}
    watch = Watch(lambda: bool({p.metadata.uid for p in _pods(core)} - before))
    verdict = _run(node_cluster, faults_root, tmp_path, {"name": "kill", "type": "pod-kill", "mode": "one"}, watch)
    assert watch.seen, "no new pod replaced the killed one"
    assert verdict["status"] in ("PASS", "FAIL"), _reasons(verdict)  # judged, not blind


def test_container_kill_restarts_a_real_container(
    node_cluster: NodeCluster, faults_root: Scene, tmp_path: Path
) -> None:
    core = k8s.CoreV1Api(node_cluster.cluster.api_client())

    def restarted() -> bool:
        return any((s.restart_count or 0) > 0 for p in _pods(core) for s in p.status.container_statuses or [])

    fault = {"name": "ckill", "type": "container-kill", "mode": "one", "containers": ["vllm"]}
    verdict = _run(node_cluster, faults_root, tmp_path, fault, Watch(restarted))
    assert restarted(), "the kubelet reports no restarted container"
    # The kill's restart reads Error, as a global OOM kill's would: the node's node-exporter (its kernel's OOM kill
    # counter did not rise) is what lets the OOM check tell them apart (kfchaos.metrics.nodeoom).
    assert verdict["status"] in ("PASS", "FAIL"), _reasons(verdict)


@pytest.mark.parametrize(
    ("fault", "stressor"),
    [
        ({"name": "cpu", "type": "stress-cpu", "mode": "all", "params": {"workers": 1, "load": 20}}, "stress-ng"),
        ({"name": "mem", "type": "stress-memory", "mode": "all", "params": {"size": "64MB"}}, "memStress"),
    ],
)
def test_stress_runs_in_the_real_containers_cgroup(
    node_cluster: NodeCluster, faults_root: Scene, tmp_path: Path, fault: dict[str, Any], stressor: str
) -> None:
    core = k8s.CoreV1Api(node_cluster.cluster.api_client())
    # chaos-daemon starts the stressor under `pause`, moves it into the container's cgroup, then resumes it
    # (pkg/chaosdaemon/stress_server_linux.go); memStress is a Python port here (scripts/cluster/localcluster).
    names = {"stress-ng": ("stress-ng", "stress-ng-cpu"), "memStress": ("python3", "memStress")}[stressor]
    watch = Watch(lambda: any(set(names) & _cgroup_commands(p) for p in _pods(core)))
    verdict = _run(node_cluster, faults_root, tmp_path, fault, watch)
    assert watch.seen, f"no {stressor} in the target's cgroups during the stage"
    assert verdict["status"] in ("PASS", "FAIL"), _reasons(verdict)
    time.sleep(2)
    assert not any(set(names) & _cgroup_commands(p) for p in _pods(core)), "the stressor outlived its fault"


def _clock_skew(target: Target) -> float:
    """The target's clock minus this host's, in seconds, from the Date header its answer carries (aiohttp stamps
    each answer from time.time(): aiohttp/web_response.py, helpers.rfc822_formatted_time): 1 s resolution."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(f"{target.url}/health", timeout=5) as answer:
        stamped = email.utils.parsedate_to_datetime(answer.headers["Date"]).timestamp()
    return stamped - time.time()


def test_a_time_offset_moves_the_real_containers_clock_and_gives_it_back(
    node_cluster: NodeCluster, faults_root: Scene, tmp_path: Path
) -> None:
    """TimeChaos through chaos-daemon (pkg/chaosdaemon/time_server_linux.go: ptrace into the container's processes,
    their vDSO clock_gettime replaced by pkg/time's fake clock): the target's own clock, as its answers' Date header
    says, runs 5 minutes behind during the stage, and is back once the fault is removed."""
    assert abs(_clock_skew(faults_root.target)) < 30  # the node shares the host's clock
    fault = {"name": "clock", "type": "time-offset", "mode": "all", "params": {"offset": "-5m"}}
    watch = Watch(lambda: _clock_skew(faults_root.target) < -240)
    verdict = _run(node_cluster, faults_root, tmp_path, fault, watch)
    assert watch.seen, "the target's Date header never ran 5 minutes behind"
    assert verdict["status"] in ("PASS", "FAIL"), _reasons(verdict)
    assert "clock verified active" in json.dumps(verdict), _reasons(verdict)
    eventually("the target's clock given back", lambda: abs(_clock_skew(faults_root.target)) < 30, timeout=60)


def test_a_network_partition_from_the_client_fails_the_run(
    node_cluster: NodeCluster, faults_root: Scene, tmp_path: Path
) -> None:
    net = node.saved_net(node_cluster.cluster.env.state)
    assert net is not None
    # The replay runs on the host and reaches the pods through their Service: kube-proxy masquerades a connection
    # from outside --cluster-cidr (KUBE-MARK-MASQ), so the pods see it from the node's bridge, the pods' gateway,
    # not from the host's address (a partition from the host's address alone let every request through: PASS).
    fault = {
        "name": "cut",
        "type": "network-partition",
        "mode": "all",
        "params": {"direction": "both", "external_targets": [net.host_ip, net.pod_gateway]},
    }
    verdict = _run(node_cluster, faults_root, tmp_path, fault, Watch(lambda: True))
    assert verdict["status"] == "FAIL", _reasons(verdict)
    assert verdict["exit_code"] == 1
    assert "error_rate" in _reasons(verdict) or "timeout_rate" in _reasons(verdict), _reasons(verdict)


def test_a_netem_fault_this_kernel_cannot_inject_is_inconclusive_with_chaos_meshs_reason_and_the_way_out(
    node_cluster: NodeCluster, faults_root: Scene, tmp_path: Path
) -> None:
    """No sch_netem here: chaos-daemon's tc fails ("unable to set tcs"), the NetworkChaos never injects, and Chaos
    Mesh can then never release it: desiredPhase Stop on a "Not Injected/Wait" record means Apply again
    (chaos-mesh controllers/common/records/controller.go), which keeps failing, so its `chaos-mesh/records`
    finalizer stays. The stage is judged not under its fault; the remove step names the object it cannot see gone
    and the command that releases it, and the run still ends with its verdict: INCONCLUSIVE, exit 2. Never a
    PASS."""
    fault = {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "100ms"}}
    # How long removal waits for Chaos Mesh to recover (kfchaos.faults.chaosmesh): it never will here.
    done = _run_local(node_cluster, faults_root, tmp_path, fault, {"KFCHAOS_RECOVER_TIMEOUT": "20s"})
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    (path,) = (tmp_path / "runs").glob("*/verdict.json")
    verdict = json.loads(path.read_text())
    reasons = _reasons(verdict)
    assert verdict["status"] == "INCONCLUSIVE", reasons
    assert "unable to set tcs" in reasons, reasons  # chaos-daemon's own failure, quoted
    assert "delay not verified active" in reasons, reasons
    assert "left Terminating, never injected" in reasons, reasons
    release = next(r for r in verdict["reasons"] if "kubectl patch networkchaos" in r)
    # The way out the run printed, taken: the object goes.
    custom = k8s.CustomObjectsApi(node_cluster.cluster.api_client())
    (stuck,) = custom.list_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NAMESPACE, "networkchaos")["items"]
    assert stuck["metadata"]["name"] in release
    custom.patch_namespaced_custom_object(
        "chaos-mesh.org",
        "v1alpha1",
        NAMESPACE,
        "networkchaos",
        stuck["metadata"]["name"],
        {"metadata": {"finalizers": None}},
    )
    eventually(
        "the released NetworkChaos gone",
        lambda: (
            not custom.list_namespaced_custom_object("chaos-mesh.org", "v1alpha1", NAMESPACE, "networkchaos")["items"]
        ),
        timeout=60,
    )
