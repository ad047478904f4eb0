"""`kfchaos tune --output`: the sweep compiled by KFP's real compiler as one pipeline whose root is a ParallelFor
(parameterIterator) over the grid's configurations, one after another, each iteration the whole chaos pipeline on
that configuration's own experiment text; no dsl.Collected fan-in (KFP 2.1.0 cannot run one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kfchaos.cli import main
from kfchaos.validate import parse_experiment
from tests.conftest import EXPERIMENTS

EXPERIMENT = EXPERIMENTS / "vllm-long-context-burst.yaml"
GRID = """\
apiVersion: kfchaos.io/v1alpha1
kind: TuneGrid
metadata: {name: cluster-settings}
spec:
  configurations:
    - name: seqs-256
      args: {max-num-seqs: 256, gpu-memory-utilization: 0.95}
      target:
        endpoint: http://llama-seqs-256.llm-serving.svc:8000
        selector: {labels: {app: llama, tune: seqs-256}}
    - name: seqs-128
      replicas: 2
      args: {max-num-seqs: 128, enable-prefix-caching: true}
      target:
        endpoint: http://llama-seqs-128.llm-serving.svc:8000
        selector: {labels: {app: llama, tune: seqs-128}}
"""


def _compile(tmp_path: Path, grid_text: str) -> tuple[int, Path]:
    grid = tmp_path / "grid.yaml"
    grid.write_text(grid_text)
    out = tmp_path / "sweep.yaml"
    return main(["tune", str(EXPERIMENT), "--grid", str(grid), "--output", str(out)]), out


def test_the_sweep_is_one_pipeline_with_a_parallel_for_over_the_configurations(tmp_path: Path) -> None:
    code, out = _compile(tmp_path, GRID)
    assert code == 0
    spec, platform = yaml.safe_load_all(out.read_text())
    assert spec["pipelineInfo"]["name"] == "vllm-long-context-burst-tune"
    (loop,) = spec["root"]["dag"]["tasks"].values()  # the loop is the whole sweep
    assert loop["iteratorPolicy"] == {"parallelismLimit": 1}  # one configuration at a time
    items = json.loads(loop["parameterIterator"]["items"]["raw"])
    experiments = [parse_experiment(text, f"item {i}") for i, text in enumerate(items)]
    assert [e.metadata.name for e in experiments] == [
        "vllm-long-context-burst-seqs-256",
        "vllm-long-context-burst-seqs-128",
    ]
    assert [e.spec.target.endpoint for e in experiments] == [
        "http://llama-seqs-256.llm-serving.svc:8000",
        "http://llama-seqs-128.llm-serving.svc:8000",
    ]
    assert experiments[1].spec.target.selector.labels == {"app": "llama", "tune": "seqs-128"}
    # Everything else is the experiment's own: the same ramp, faults and SLO in every iteration.
    original = parse_experiment(EXPERIMENT.read_text(), str(EXPERIMENT))
    for experiment in experiments:
        assert experiment.spec.traffic == original.spec.traffic and experiment.spec.faults == original.spec.faults
        assert experiment.spec.slo == original.spec.slo
    # Each iteration runs the experiment's whole chaos pipeline, nested, on the loop item.
    body = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]
    (nested,) = body.values()
    assert nested["inputs"]["parameters"]["experiment"] == {
        "componentInputParameter": loop["parameterIterator"]["itemInput"]
    }
    nested_dag = spec["components"][nested["componentRef"]["name"]]["dag"]["tasks"]
    assert "exit-handler-1" in nested_dag and "cleanup" in nested_dag
    # No fan-in: nothing reads the loop's outputs (KFP 2.1.0 cannot collect them), and there is one loop only.
    text = out.read_text()
    assert text.count("parameterIterator") == 1 and "dsl.Collected" not in text
    assert (
        "outputs" not in loop
        and "exec-verdict-report" in platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    )


def test_a_configuration_without_a_cluster_target_is_refused_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = GRID.replace(
        "      target:\n        endpoint: http://llama-seqs-256.llm-serving.svc:8000\n"
        "        selector: {labels: {app: llama, tune: seqs-256}}\n",
        "",
    )
    code, out = _compile(tmp_path, text)
    assert code == 3 and not out.exists()
    err = capsys.readouterr().err
    assert (
        f"{tmp_path / 'grid.yaml'}:6: spec.configurations[0]: a cluster sweep needs each configuration's target" in err
    )
