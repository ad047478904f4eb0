"""How the real vLLM engine dies of memory, and how kfchaos counts it.

The engine runs as the demo's unsafe scenario deploys it (kfchaos.demo.runner.scenarios ENGINE_SCENARIOS["unsafe"]): in
a memory cgroup of the container's 2.75 GiB limit, under the supervisor that records its ends as containerd and the
kubelet
on cgroup v1 do (kfchaos.demo.stack.enginesupervisor), scraped by a real Prometheus beside vLLM's own /metrics. A
long-context burst (96 prompts of 4 000 tokens sharing one document, as kfchaos's long-context-burst fault sends them)
makes vLLM prefill up to --max-num-batched-tokens 262144 of them in one step: the worker's activations for it take
the cgroup past its limit and the kernel OOM-kills `VLLM::Worker`, not the API server (the container's first
process). The requests get HTTP 500 (EngineDeadError) and the API server shuts itself down with exit code 0. That
exit is still an OOM kill: the kernel's own counter says so, the supervisor records OOMKilled with exit code 0
(containerd's TaskOOM, kubernetes/kubernetes#104454), and kfchaos's OOM count (kfchaos.metrics.oom, the verdict's)
reads one host-memory OOM kill from the series in Prometheus.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kfchaos.demo.runner.scenarios import ENGINE_SCENARIOS
from kfchaos.demo.server.pod import DEMO_NAMESPACE, DEMO_POD
from kfchaos.demo.stack import memcgroup
from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.demo.stack.vllmengine import MODEL_NAME, EngineInstall
from kfchaos.metrics import oom
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.traffic.wire import filler_text
from tests.conftest import require_tool
from tests.engine.conftest import post_json

BURST = 96
CONTEXT_TOKENS = 4000
DEATH_TIMEOUT = 300.0  # the burst, the worker's kill and the server's own shutdown, on a busy 2-core machine


def require_cgroup() -> None:
    why = memcgroup.unavailable()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def _burst(url: str) -> list[tuple[int, dict[str, object]]]:
    """BURST concurrent long prompts sharing one document (kfchaos.traffic.wire's filler, one token a word)."""
    answers: list[tuple[int, dict[str, object]]] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        body = {
            "model": MODEL_NAME,
            "prompt": filler_text(CONTEXT_TOKENS) + f"\n\n[{index}] Summarize",
            "max_tokens": 4,
        }
        try:
            answer = post_json(f"{url}/v1/completions", body, timeout=DEATH_TIMEOUT)
        except OSError as error:  # the server gone before it answered: no status at all
            answer = (0, {"error": str(error)})
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEATH_TIMEOUT)
    return answers


def _state(stack: DemoStack) -> dict[str, object]:
    return dict(json.loads(stack.state_file.read_text()))


def _until(condition: str, check: Callable[[], bool], timeout: float = DEATH_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:g}s: {condition}")


def test_the_kernels_kill_of_the_worker_is_counted_as_an_oom_kill_though_the_server_exits_0(
    vllm_install: EngineInstall, tmp_path: Path
) -> None:
    require_cgroup()
    require_tool("prometheus", "the OOM series are read from a real Prometheus")
    deployment = ENGINE_SCENARIOS["unsafe"]
    with DemoStack(deployment, workdir=tmp_path / "stack") as stack:
        assert stack.prometheus_url
        client = PrometheusClient(stack.prometheus_url)
        start = time.time()
        # A prompt over --max-model-len is refused with 400 and the engine lives on: a client's error, not a death.
        status, body = post_json(
            f"{stack.server_url}/v1/completions",
            {"model": MODEL_NAME, "prompt": filler_text(deployment.settings.max_model_len + 100), "max_tokens": 4},
        )
        assert status == 400, body
        assert "maximum context length" in json.dumps(body) or "max_model_len" in json.dumps(body), body

        answers = _burst(stack.server_url)
        statuses = sorted({status for status, _ in answers})
        # The worker died under the burst: what was in flight got 500 (EngineDeadError), none was served.
        assert 500 in statuses and 200 not in statuses, statuses
        dead = [body for status, body in answers if status == 500]
        assert any("EngineCore encountered an issue" in json.dumps(body) for body in dead), dead[:2]

        _until("the supervisor saw the container end", lambda: int(str(_state(stack)["restarts"])) >= 1)
        state = _state(stack)
        log = Path(str(state["previous_log"])).read_text(errors="replace")
        # vllm/v1/executor/multiproc_executor.py start_worker_monitor: the worker, not the API server, died.
        assert "died unexpectedly" in log, log[-3000:]
        assert state["restarts"] == 1
        assert state["oom_kills"] == 1  # the cgroup's own oom_kill counter: the kernel's kill
        assert state["last_terminated_reason"] == "OOMKilled"
        assert state["last_exit_code"] == 0  # the API server shut itself down cleanly: exit 0, OOMKilled all the same

        def shown() -> bool:
            found = client.instant(
                f'kube_pod_container_status_restarts_total{{namespace="{DEMO_NAMESPACE}",pod="{DEMO_POD}"}} >= 1'
            )
            return bool(found)

        _until("Prometheus scraped the restart", shown, 60)
        time.sleep(3)  # a few scrapes after it
        end = time.time()
        counted = oom.collect(client, Scope(DEMO_NAMESPACE, (DEMO_POD,)), start - 2, end, 1.0)
        window = oom.count(counted, start, end, grace=1.0)
    assert window.missing is None, window.missing
    assert window.host == 1  # restarts x last terminated reason OOMKilled (kube-state-metrics' series)
    assert window.cadvisor == 1  # container_oom_events_total of the killed container's cgroup, scraped while it lived
    assert window.gpu == 0 and window.unread == 0
    assert counted.series[oom.CRASHES].values[-1] == 0  # not a crash: the exit code 0 did not hide the kill
