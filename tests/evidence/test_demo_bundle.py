"""The bundle for the demo's OOM kill: the demo server is OOM-killed by a burst under its supervisor, and the
bundle reads the pod status, events and previous log from the supervisor (kfchaos.demo.faults.kubeview) and the
cAdvisor-style memory series from the demo's own Prometheus, as it would from a cluster."""

from __future__ import annotations

import json
import time

import pytest

from kfchaos.demo.faults.kubeview import DemoKube
from kfchaos.demo.stack.demostack import DemoStack, ServerSettings, wait_http
from kfchaos.evidence.model import Bundle
from kfchaos.evidence.runbundle import for_run
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.validate import parse_experiment
from tests.conftest import require_tool
from tests.demo.test_oom_series import _burst, _restarts_seen
from tests.verdict.builders import experiment_text

pytestmark = pytest.mark.integration


def test_the_demo_oom_kill_has_its_evidence() -> None:
    require_tool("prometheus", "the demo's local Prometheus")
    spec = parse_experiment(experiment_text().replace("namespace: serving", "namespace: demo"), "demo.yaml")
    with DemoStack(ServerSettings(restart_delay_s=0.5)) as stack:
        assert stack.prometheus_url
        client = PrometheusClient(stack.prometheus_url)
        start = time.time()
        wait_http(f"{stack.server_url}/health")
        time.sleep(2)  # a few scrapes of the first container
        _burst(stack.server_url)
        wait_http(f"{stack.server_url}/health")
        kills = json.loads(stack.state_file.read_text())["oom_kills"]
        assert kills >= 1
        _restarts_seen(client, kills)
        data = for_run(spec, "FAIL", None, (start - 2, time.time()), ["oom_kill_rate"],
                       kube=(DemoKube(stack.state_file), ""), source=(client, ""))  # fmt: skip
    bundle = Bundle.from_dict(data)
    assert bundle is not None
    items = {i.kind: i for i in bundle.items}
    assert items["last-state"].data["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert items["last-state"].data["lastState"]["terminated"]["exitCode"] == 137
    assert {e["reason"] for e in items["events"].data} == {"Created", "Started"}
    assert "OOM kill" in items["previous-log"].data  # the server's own last words before the kill
    memory = items["memory"]
    assert memory.collected, memory.why_not
    assert memory.data["limit_bytes"] > 0 and "of the" in memory.shows  # working set against the limit
    assert items["cgroup-oom-events"].findings == {"cgroup_oom_events": False}  # lost with the cgroup, as on a cluster
    assert items["kv-cache"].collected
    assert not items["gpu-memory"].collected and "series absent" in (items["gpu-memory"].why_not or "")
    assert bundle.findings()["host_oom_kill"] is True
