"""`kfchaos tune --local` on the demo server, end to end: each configuration of a small grid is a real chaos run
(its own demo stack, control baseline, compiled pipeline through kfp.local, run folder), and the recommendation
is read from those runs' verdicts; the sweep's page (--html) draws the same outcome.

The grid prices the unsafe settings (vLLM defaults pushed for throughput) below the tuned ones, so only the rules
keep them from being recommended: their run FAILs and the demo server is OOM-killed by the first long-context
burst. The experiment is the demo's own, cut to one 15 s stage at 100 % (469 requests: enough for the 1 % limits,
which `tune` checks before anything runs) so the test stays short (~170 s on a busy 2-core machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kfchaos.demo.runner.localtune import DEMO_TUNE_EXPERIMENT
from kfchaos.tune.frontier import OOM_KILLED, RECOMMENDED
from tests.conftest import require_tool
from tests.kfp_glue.conftest import copy_sources, kfchaos
from tests.tune.pagereader import traces

GRID = """\
apiVersion: kfchaos.io/v1alpha1
kind: TuneGrid
metadata: {name: demo-check}
spec:
  configurations:
    - name: unsafe
      cost: 1
      args: {max-num-seqs: 256, gpu-memory-utilization: 0.95}
    - name: tuned
      cost: 2
      args: {max-num-seqs: 128, gpu-memory-utilization: 0.85, enable-prefix-caching: true}
"""


def _one_stage_demo_experiment(path: Path) -> Path:
    document = yaml.safe_load(DEMO_TUNE_EXPERIMENT.read_text())
    document["metadata"]["name"] = "tune-check"
    document["spec"]["traffic"].update(stages=[100], stage_duration="15s")
    for fault in document["spec"]["faults"]:
        if "stages" in fault:
            fault["stages"] = [100]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.integration
@pytest.mark.slow
def test_tune_recommends_the_tuned_settings_and_never_the_cheaper_unsafe_ones(tmp_path: Path) -> None:
    require_tool("prometheus", "the demo stack's Prometheus")
    root = copy_sources(tmp_path / "repo")
    experiment = _one_stage_demo_experiment(tmp_path / "tune-check.yaml")
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    runs = tmp_path / "runs"
    done = kfchaos(
        "tune", str(experiment), "--grid", str(grid), "--local", "--json", "--runs", str(runs),
        "--baseline-seconds", "5", "--html", str(tmp_path / "tune.html"), timeout=900, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    unsafe, tuned = result["configurations"]

    assert result["recommendation"]["recommended"] == "tuned"
    assert result["recommendation"]["cheapest_means"] == "the grid's own `cost` of each configuration"
    # The unsafe settings were cheaper and were run: their own verdict and the OOM rule keep them out.
    assert (unsafe["name"], unsafe["cost"], unsafe["status"], unsafe["breakpoint"]) == ("unsafe", 1, "FAIL", None)
    assert unsafe["oom_kills"] >= 1
    assert unsafe["stages"][0]["status"] == "FAIL"
    assert any("unsafe:" in line and "never recommended" in line for line in result["recommendation"]["evidence"])
    # The recommended one PASSed at 100 % under both faults, with no OOM kill and (nearly) all its requests good.
    assert (tuned["status"], tuned["breakpoint"], tuned["oom_kills"]) == ("PASS", 100, 0)
    stage = tuned["stages"][0]
    assert (stage["stage"], stage["status"]) == (100, "PASS") and stage["requests"] >= 368
    assert stage["goodput"] is not None and stage["goodput"] >= 0.99
    assert stage["p99_infinite"] is False and 0 < stage["p99"] <= 12  # the experiment's p99_max
    # The figures are the run folders' own: each configuration left a judged run folder.
    for configuration in (unsafe, tuned):
        verdict = json.loads((Path(configuration["run_dir"]) / "verdict.json").read_text())
        assert verdict["status"] == configuration["status"]
        assert Path(configuration["run_dir"]).parent == runs.resolve()
    # The page of the same sweep: the unsafe settings drawn OOM-killed, the tuned ones ringed as the recommendation.
    drawn = traces((tmp_path / "tune.html").read_text())
    assert drawn[OOM_KILLED]["customdata"] == ["unsafe"] and drawn[RECOMMENDED]["customdata"] == ["tuned"]
