"""Names and labels that reach a label selector or a Prometheus query are checked (kfchaos.faults.naming.check_run_id,
kfchaos.metrics.catalog.Scope and promql_string): none can widen a cleanup or a query.

Against the loopback Kubernetes API server, an empty run id used to sweep every run's faults; against a real
Prometheus, a label value with quotes, braces and `or` selects its own series only.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.errors import KfchaosError
from kfchaos.faults.chaosmesh import HOST_ENV
from kfchaos.metrics.catalog import Scope, promql_string
from kfchaos.metrics.prometheus import PrometheusClient
from tests.faults.conftest import TARGET_LABELS, make_backend, manifests
from tests.faults.experiments import BASE, experiment_with
from tests.support.kubeapi import KubeApiServer
from tests.support.prometheus import PrometheusServer, backfill


@pytest.fixture
def two_runs() -> Iterator[KubeApiServer]:
    """The loopback API server holding the faults of two runs, run-a and run-b (two objects each)."""
    with KubeApiServer(inject_delay=0.05) as server:
        for index in range(3):
            server.add_pod("llm-serving", f"vllm-{index}", TARGET_LABELS, containers=["vllm"])
        backend = make_backend(server.url)
        for run_id in ("run-a", "run-b"):
            for manifest in manifests(run_id):
                backend.apply(manifest)
        assert len(server.chaos_objects()) == 4
        yield server


@pytest.mark.parametrize("run_id", ["", "run-a,run-b", "run-a in (run-b)", "run-a!", " run-a"])
def test_a_run_id_that_is_not_one_runs_id_sweeps_nothing(
    run_id: str, two_runs: KubeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cleanup", "--run-id", run_id, "--host", two_runs.url]) == 3
    assert "not a run's id" in capsys.readouterr().err or run_id == ""
    assert len(two_runs.chaos_objects()) == 4, "a cleanup of one run swept others"


def test_an_empty_run_id_in_the_pipelines_exit_handler_sweeps_nothing(
    two_runs: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run id is a pipeline parameter: the exit handler's sweep must not read "" as every run.
    from kfchaos.steps import faults

    monkeypatch.setenv(HOST_ENV, two_runs.url)
    document = copy.deepcopy(BASE)
    document["spec"]["faults"] = [
        {"name": "delay", "type": "network-delay", "mode": "all", "params": {"latency": "1s"}}
    ]
    text = yaml.safe_dump(document)
    experiment_with(*document["spec"]["faults"])  # a valid experiment
    with pytest.raises(KfchaosError, match="run id '': empty"):
        faults.cleanup(text, "", str(tmp_path / "record.json"))
    assert len(two_runs.chaos_objects()) == 4


def test_one_runs_cleanup_still_takes_exactly_its_own(two_runs: KubeApiServer) -> None:
    assert main(["cleanup", "--run-id", "run-a", "--host", two_runs.url]) == 0
    left = two_runs.chaos_objects()
    assert len(left) == 2 and {o["metadata"]["labels"]["kfchaos.io/run-id"] for o in left} == {"run-b"}


def test_names_that_reach_promql_must_be_kubernetes_names() -> None:
    for pod in ('vllm-0"} or vllm:num_requests_running{namespace="other', "vllm-0|.*", "Vllm-0"):
        with pytest.raises(ValueError, match="not a Kubernetes pod name"):
            Scope("serving", (pod,))
    with pytest.raises(ValueError, match="not a Kubernetes namespace name"):
        Scope('serving",namespace!="')


def test_baseline_capture_refuses_a_pod_crafted_as_a_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import EXPERIMENTS

    argv = ["baseline", "capture", "--experiment", str(EXPERIMENTS / "vllm-network-delay.yaml"),
            "--prometheus", "http://127.0.0.1:9", "--out", str(tmp_path / "b.yaml")]  # fmt: skip
    assert main([*argv, "--pod", 'vllm-0"} or up{job="x']) == 3
    assert "--pod: pod" in capsys.readouterr().err and not (tmp_path / "b.yaml").exists()


@pytest.mark.integration
def test_a_quoted_label_value_selects_its_own_series_on_a_real_prometheus(tmp_path: Path) -> None:
    # Values as the API server or Prometheus could answer them; each quoted, each must select itself only.
    values = ['pod"} or kfchaos_probe{pod=~".+', "back\\slash", "new\nline", "plain"]
    now = int(time.time())
    lines = ["# TYPE kfchaos_probe gauge"]
    for index, value in enumerate(values):
        label = json.dumps(value)  # OpenMetrics label values take JSON's escapes for \\, \" and \n
        lines += [f"kfchaos_probe{{pod={label}}} {index} {t}" for t in range(now - 600, now, 60)]
    backfill(tmp_path / "data", "\n".join(lines) + "\n# EOF\n")
    with PrometheusServer(tmp_path / "data") as server:
        client = PrometheusClient(server.url)
        for index, value in enumerate(values):
            found = client.instant(f"kfchaos_probe{{pod={promql_string(value)}}}", at=now - 60)
            assert [(s.labels.get("pod"), s.value) for s in found] == [(value, float(index))], value
