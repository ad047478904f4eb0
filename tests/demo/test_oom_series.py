"""The demo's OOM kills, read the way a cluster's are: its local Prometheus scrapes the series the server
exports as kube-state-metrics and cAdvisor do, and kfchaos.metrics.oom counts them per container series.

An OOM kill must be counted even though cAdvisor's counter (per container instance) never shows it; a kill
by SIGKILL that is not an OOM is a crash, told apart by its previous container log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from kfchaos.demo.server.pod import DEMO_NAMESPACE, DEMO_POD
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings, wait_http
from kfchaos.demo.stack.ports import free_port
from kfchaos.metrics import crashlogs, oom
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient
from tests.conftest import require_tool

pytestmark = pytest.mark.integration
MODEL = "demo/llama-3-8b-sim"


def _burst(base: str, count: int = 48) -> None:
    document = "lorem ipsum " * 5400  # ~16k tokens: the unsafe KV pool passes the memory limit

    def one(i: int) -> None:
        body = {"model": MODEL, "prompt": f"{document}\n\nQuestion {i}?", "max_tokens": 8}
        with contextlib.suppress(requests.RequestException):  # cut off by the kill
            requests.post(f"{base}/v1/completions", json=body, timeout=30)

    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(one, range(count)))


def _restarts_seen(client: PrometheusClient, at_least: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        samples = client.instant(f'kube_pod_container_status_restarts_total{{pod="{DEMO_POD}"}}')
        if samples and samples[0].value >= at_least:
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never saw {at_least} restart(s)")


def test_demo_oom_kill_and_crash_counted_from_the_cluster_series() -> None:
    require_tool("prometheus", "the demo's local Prometheus")
    with DemoStack(ServerSettings(restart_delay_s=0.5)) as stack:
        assert stack.prometheus_url
        client = PrometheusClient(stack.prometheus_url)
        scope = Scope(DEMO_NAMESPACE, (DEMO_POD,))
        start = time.time()
        wait_http(f"{stack.server_url}/health")
        time.sleep(2)  # a few scrapes of the first container
        _burst(stack.server_url)
        wait_http(f"{stack.server_url}/health")
        state = json.loads(stack.state_file.read_text())
        kills = state["oom_kills"]  # the supervisor's own count: what a cluster would show
        assert kills >= 1 and state["restarts"] == kills
        _restarts_seen(client, kills)
        os.kill(state["pid"], signal.SIGKILL)  # a kill that is not an OOM kill
        _restarts_seen(client, kills + 1)
        time.sleep(2)
        counted = oom.collect(
            client, scope, start - 2, time.time(), 1.0, read_log=crashlogs.demo_reader(stack.state_file)
        )
        window = oom.count(counted, start, time.time(), grace=1.0)
    assert window.missing is None, window.missing
    assert window.host == kills  # from restarts x last terminated reason OOMKilled
    assert window.cadvisor == 0  # cAdvisor's per-instance counter never showed it (google/cadvisor#3015)
    assert counted.series[oom.CRASHES].values[-1] == 1  # the SIGKILL: reason Error, exit code 137
    assert window.gpu == 0 and window.unread == 0  # its previous log was read: no CUDA out of memory


@pytest.mark.parametrize(
    ("flags", "exported"),
    [([], False), (["--restarts", "0"], True)],
    ids=["a pod of a real cluster", "under the demo's supervisor"],
)
def test_the_server_models_the_clusters_series_only_under_the_demos_supervisor(
    flags: list[str], exported: bool
) -> None:
    """In a pod of a real cluster the server's copy of kube-state-metrics' restart count, scraped from the pod,
    would sit beside the real one under the pod's own labels and disagree with it (on the real node the verdict
    held the replaced pod's count unknown for it): there the cluster's own exporters are the only source."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "kfchaos.demo.server.api", "--port", str(port), *flags])
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 30, process)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        process.terminate()
        process.wait(10)
    assert "vllm:e2e_request_latency_seconds_count" in text
    for name in ("kube_pod_container_status_restarts_total", "container_oom_events_total",
                 "container_memory_working_set_bytes", "kube_pod_container_resource_limits"):  # fmt: skip
        assert (f"\n{name}{{" in text) is exported, name
