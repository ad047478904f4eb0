"""OOM kills counted from the series a cluster keeps, on a real Prometheus holding backfilled history.

Each case is a history as a cluster writes it (kube-state-metrics' pod series, cAdvisor's per-container
series), read back through `snapshot_for_experiment` and judged by `evaluate` over one 10-minute stage:
- replaced: the OOM-killed container's cAdvisor series ends at 0 and a new one starts at 0
  (google/cadvisor#3015); kube-state-metrics' restart count steps up with last reason OOMKilled -> FAIL;
- vanished: a pod with 3 old kills disappears, its counters with it ([6, 6, 3, 3, 3] summed) -> no kill;
- late: the restart shows one sample after the stage's last request, inside one scrape interval -> counted;
- gpu: a restart with reason Error; the previous container log decides whether it was a CUDA OOM;
- node: a restart with reason Error or Completed while the node's kernel OOM-killed (node-exporter's
  node_vmstat_oom_kill rose: a global OOM, or a cgroup kill whose TaskOOM event was lost) -> counted as an OOM
  kill; on a node whose counter nobody scrapes -> INCONCLUSIVE (kfchaos.metrics.nodeoom).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from kfchaos.metrics import nodeoom
from kfchaos.metrics.collect import PROMETHEUS_ENV, snapshot_for_experiment
from kfchaos.metrics.oom import CrashLogReader
from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.model import Check, Status
from tests.support.prometheus import PrometheusServer, backfill
from tests.verdict.builders import experiment, records

pytestmark = pytest.mark.integration
SAMPLE = 15  # seconds between samples in the history
STAGE = 600.0
REQUESTS = 3000  # 1 kill in 3000 requests is far above the default 0.001 % limit
CUDA_OOM = (
    "ERROR [core.py:700] EngineCore encountered a fatal error.\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB"
)

Points = list[tuple[float, float]]


@dataclass
class Family:
    name: str  # the sample name (counters end in _total)
    kind: str
    series: list[tuple[str, Points]]

    def lines(self) -> list[str]:
        family = self.name.removesuffix("_total") if self.kind == "counter" else self.name
        out = [f"# TYPE {family} {self.kind}"]
        for labels, points in self.series:
            out += [f"{self.name}{{{labels}}} {float(v)!r} {t:.0f}" for t, v in points]
        return out


def steps(times: np.ndarray, changes: dict[float, float], until: float | None = None) -> Points:
    """A series sampled at `times` (up to `until`), taking value v from each change time on."""
    out = []
    for t in times:
        if until is not None and t > until:
            break
        value = 0.0
        for at, v in sorted(changes.items()):
            if t >= at:
                value = v
        out.append((float(t), value))
    return out


def history(t0: float, end: float) -> str:
    times = np.arange(t0 - 1200, end, SAMPLE, dtype=float)
    c = 'namespace="serving",container="vllm"'
    late = t0 + STAGE + 7  # shows at the first sample after the stage
    restarts = Family(
        "kube_pod_container_status_restarts_total",
        "counter",
        [
            (f'{c},pod="rep-0",uid="u-rep"', steps(times, {t0 + 300: 1})),
            (f'{c},pod="van-0",uid="u-van0"', steps(times, {0: 3}, until=t0 + 100)),
            (f'{c},pod="van-1",uid="u-van1"', steps(times, {0: 3})),
            (f'{c},pod="late-0",uid="u-late"', steps(times, {late: 1})),
            (f'{c},pod="gpu-0",uid="u-gpu"', steps(times, {t0 + 300: 1})),
            (f'{c},pod="glob-0",uid="u-glob"', steps(times, {t0 + 300: 1})),
            (f'{c},pod="lost-0",uid="u-lost"', steps(times, {t0 + 300: 1})),
            (f'{c},pod="blind-0",uid="u-blind"', steps(times, {t0 + 300: 1})),
            (f'{c},pod="pair-0",uid="u-pair"', steps(times, {t0 + 300: 1, t0 + 360: 2})),
            (f'{c},pod="keep-0",uid="u-keep"', steps(times, {})),
        ],
    )
    always = [(float(t), 1.0) for t in times]
    reasons = Family(
        "kube_pod_container_status_last_terminated_reason",
        "gauge",
        [
            (f'{c},pod="rep-0",uid="u-rep",reason="OOMKilled"', [p for p in always if p[0] >= t0 + 300]),
            (f'{c},pod="van-0",uid="u-van0",reason="OOMKilled"', [p for p in always if p[0] <= t0 + 100]),
            (f'{c},pod="van-1",uid="u-van1",reason="OOMKilled"', always),
            (f'{c},pod="late-0",uid="u-late",reason="OOMKilled"', [p for p in always if p[0] >= late]),
            (f'{c},pod="gpu-0",uid="u-gpu",reason="Error"', [p for p in always if p[0] >= t0 + 300]),
            (f'{c},pod="glob-0",uid="u-glob",reason="Error"', [p for p in always if p[0] >= t0 + 300]),
            (f'{c},pod="lost-0",uid="u-lost",reason="Completed"', [p for p in always if p[0] >= t0 + 300]),
            (f'{c},pod="blind-0",uid="u-blind",reason="Error"', [p for p in always if p[0] >= t0 + 300]),
            # Killed, then its next start fails (vLLM's failed start after a kill, docs/vllm.md).
            # OOMKilled ends at 0, not absent: a backfill writes no staleness marker, and the query would repeat the
            # last 1 for five minutes (Prometheus's lookback), as it never does after kube-state-metrics drops it.
            (
                f'{c},pod="pair-0",uid="u-pair",reason="OOMKilled"',
                [(t, float(t < t0 + 360)) for t, _ in always if t >= t0 + 300],
            ),
            (f'{c},pod="pair-0",uid="u-pair",reason="Error"', [p for p in always if p[0] >= t0 + 360]),
        ],
    )
    # Which node each pod runs on (kube-state-metrics), node-exporter's pods among them.
    pod_info = Family(
        "kube_pod_info",
        "gauge",
        [
            (f'namespace="{ns}",pod="{pod}",uid="{uid}",node="{node}"', always)
            for ns, pod, uid, node in (
                ("serving", "gpu-0", "u-gpu", "n-quiet"),
                ("serving", "glob-0", "u-glob", "n-hot"),
                ("serving", "lost-0", "u-lost", "n-labelled"),
                ("serving", "blind-0", "u-blind", "n-blind"),
                ("serving", "pair-0", "u-pair", "n-pair"),
                ("serving", "keep-0", "u-keep", "n-keep"),
                ("monitoring", "node-exporter-q", "u-neq", "n-quiet"),
                ("monitoring", "node-exporter-h", "u-neh", "n-hot"),
            )
        ],
    )
    # The node kernels' OOM counters: kube-prometheus-stack's shape (node-exporter's own namespace and pod, no
    # node label) for n-quiet and n-hot, a scrape that labels the node for n-labelled, none for n-blind. n-hot's
    # kernel kills at t0 + 290, n-labelled's at t0 + 295; n-quiet's kills nothing.
    exporter = 'namespace="monitoring",instance="10.0.0.{}:9100",job="node-exporter"'
    node_oom = Family(
        "node_vmstat_oom_kill",
        "unknown",
        [
            (f'{exporter.format(1)},pod="node-exporter-q"', steps(times, {0: 5})),
            (f'{exporter.format(2)},pod="node-exporter-h"', steps(times, {0: 2, t0 + 290: 3})),
            ('instance="n-labelled",job="node",node="n-labelled"', steps(times, {0: 7, t0 + 295: 8})),
            ('instance="n-pair",job="node",node="n-pair"', steps(times, {0: 1, t0 + 295: 2})),
            # A worker killed while its server lives on (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH): no restart anywhere.
            ('instance="n-keep",job="node",node="n-keep"', steps(times, {0: 3, t0 + 200: 4})),
        ],
    )
    cadvisor = Family(
        "container_oom_events_total",
        "counter",
        [
            # The killed container's series ends without ever showing the kill; the new one starts at 0.
            (f'{c},pod="rep-0",id="/kubepods/c1"', steps(times, {}, until=t0 + 285)),
            (f'{c},pod="rep-0",id="/kubepods/c2"', [p for p in steps(times, {}) if p[0] >= t0 + 315]),
            (f'{c},pod="van-0",id="/kubepods/v0"', steps(times, {0: 3}, until=t0 + 100)),
            (f'{c},pod="van-1",id="/kubepods/v1"', steps(times, {0: 3})),
        ],
    )
    # The kubelets' cgroup versions (as kube-prometheus-stack's kubelet job labels them with the node): n-quiet's
    # is v1, n-hot's v2; the others' kubelets are not scraped.
    cgroup = Family(
        "kubelet_cgroup_version",
        "gauge",
        [(f'job="kubelet",node="{node}"', steps(times, {0: v})) for node, v in (("n-quiet", 1), ("n-hot", 2))],
    )
    families = (restarts, reasons, cadvisor, pod_info, node_oom, cgroup)
    lines = [*(line for family in families for line in family.lines()), "# EOF", ""]
    return "\n".join(lines)


@dataclass
class Cluster:
    url: str
    t0: float


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    end = int(time.time()) // 3600 * 3600 - 3600
    t0 = float(end - 3 * 3600)
    tmp = tmp_path_factory.mktemp("prom-oom")
    backfill(tmp / "data", history(t0, end))
    # A 30 s scrape interval: the grace after a stage that the count reads from the server's configuration.
    with PrometheusServer(tmp / "data", scrape_interval="30s") as server:
        yield Cluster(server.url, t0)


def oom_check(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, *pods: str, read_log: CrashLogReader | None = None
) -> Check:
    monkeypatch.setenv(PROMETHEUS_ENV, cluster.url)
    spec = experiment(stages=(10,))
    window = (cluster.t0, cluster.t0 + STAGE)
    metrics = snapshot_for_experiment(spec, window, step=15.0, pods=pods, read_log=read_log or (lambda *a: None))
    latency = np.full(REQUESTS, 0.05)
    table = records(10, latency, start=cluster.t0, rate=REQUESTS / STAGE)
    return evaluate(table, spec, metrics=metrics).stage(10).check("oom_kill_rate")


def test_kill_of_a_replaced_container_is_counted(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "rep-0")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills_kube_state_metrics"] == 1
    assert check.details["host_oom_kills_cadvisor"] == 0  # the series cAdvisor keeps lost it
    assert "1 host-memory OOM kill" in check.reason


def test_a_pod_that_disappears_adds_no_phantom_kills(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "van-0", "van-1")
    assert check.status is Status.PASS, check.reason
    assert check.details["oom_kills"] == 0
    assert check.details["host_oom_kills_cadvisor"] == 0


def test_a_kill_in_the_last_scrape_interval_is_counted(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "late-0")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills"] == 1


def test_a_cuda_oom_crash_counts_as_a_gpu_oom(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str, str]] = []

    def read(namespace: str, pod: str, container: str) -> str:
        asked.append((namespace, pod, container))
        return CUDA_OOM

    check = oom_check(cluster, monkeypatch, "gpu-0", read_log=read)
    assert asked == [("serving", "gpu-0", "vllm")]
    assert check.status is Status.FAIL, check.reason
    assert check.details["gpu_oom_crashes"] == 1 and check.details["host_oom_kills"] == 0
    assert "1 GPU OOM crash" in check.reason


def test_an_unreadable_crash_log_is_inconclusive(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "gpu-0")
    assert check.status is Status.INCONCLUSIVE, check.reason
    assert check.details["crash_restarts_unread"] == 1
    assert "could not be read" in check.reason


def test_a_crash_for_another_cause_is_not_an_oom(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # gpu-0's node (n-quiet) killed nothing; another node (n-hot) did, at the same time: not this crash's cause.
    check = oom_check(cluster, monkeypatch, "gpu-0", read_log=lambda *a: "ValueError: bad sampling params\n")
    assert check.status is Status.PASS, check.reason
    assert check.details["nodes"] == {"n-quiet": nodeoom.kill_shape(1)}
    assert check.details["oom_kills"] == 0


def test_a_crash_while_the_node_kernel_oom_killed_is_an_oom_kill(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A global OOM: reason Error, no cgroup event; the node's node_vmstat_oom_kill rose 10 s before the crash.
    check = oom_check(cluster, monkeypatch, "glob-0", read_log=lambda *a: "INFO: Started server process\n")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills_node"] == 1 and check.details["host_oom_kills"] == 1
    assert "1 a crash while its node's kernel OOM-killed" in check.reason
    # The run records how a kill looks on the node it ran on: cgroup v2, the whole container.
    assert check.details["nodes"]["n-hot"]["cgroup_version"] == 2, check.details["nodes"]
    assert "memory.oom.group" in check.details["nodes"]["n-hot"]["oom_kill_takes"]


def test_a_lost_oom_event_is_still_an_oom_kill(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # The TaskOOM event lost to the exit (containerd#8180): Completed, exit 0; the node's counter labels its node.
    check = oom_check(cluster, monkeypatch, "lost-0", read_log=lambda *a: "INFO: Shutting down\n")
    assert check.status is Status.FAIL, check.reason
    assert check.details["host_oom_kills_node"] == 1


def test_a_crash_on_a_node_nobody_watches_cannot_pass(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    check = oom_check(cluster, monkeypatch, "blind-0", read_log=lambda *a: "ValueError: bad sampling params\n")
    assert check.status is Status.INCONCLUSIVE, check.reason
    assert check.details["crash_restarts_node_unknown"] == 1
    assert check.details["nodes"]["n-blind"]["cgroup_version"] is None  # its kubelet is not scraped either
    assert "node_vmstat_oom_kill" in check.reason


def test_one_kernel_kill_explains_one_death(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # One kill (OOMKilled), then a failed start (Error) a minute later; the node's kernel counted one kill.
    check = oom_check(cluster, monkeypatch, "pair-0", read_log=lambda *a: "RuntimeError: not enough memory for kv\n")
    assert check.status is Status.FAIL, check.reason
    assert check.details["oom_kills"] == 1 and check.details["host_oom_kills_node"] == 0, check.details


def test_a_node_kill_no_restart_explains_is_reported_not_judged(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node is shared: its kernel's kill may be another pod's. Reported; the error rate judges a dead engine.
    check = oom_check(cluster, monkeypatch, "keep-0")
    assert check.status is Status.PASS, check.reason
    assert check.details["node_oom_kills_unexplained"] == 1
    assert "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH" in check.reason
