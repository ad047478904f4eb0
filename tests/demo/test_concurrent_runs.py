"""Issue 35 §4: a run owns its folders. Two real demos (each its own stack and its kfp.local pipeline) of the same
experiment name, started together with one --runs folder, must keep two run folders, each with its own verdict.
Before, both runs' kfp.local outputs went to one pipeline root (runs/.kfp) and each run took "the newest run
folder of that name" there as its own: the run that ended first could report the other's folder and verdict,
and one run's results were lost without a word. Here one run's SLO holds (PASS) and the other's cannot (a 1 ms
P99: FAIL), so a run that reports the other's folder shows the wrong verdict."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kfchaos.rundir import layout
from tests.demo.test_rejudge import PASSING
from tests.demo.test_scenarios import SMALL, _write
from tests.kfp_glue.conftest import copy_sources

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="the demo needs Prometheus (`make prometheus`)"),
]
ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 600  # two demos side by side on a busy 2-core machine

# The same scenario name in both, loaded as `kfchaos demo` loads it; only the SLO differs.
DEMO = """\
import sys
from pathlib import Path
from kfchaos.demo.runner.scenarios import main
sys.exit(main(["tiny-delay"], Path(sys.argv[1]), Path(sys.argv[2]), baseline_seconds=5.0, directory=Path(sys.argv[3])))
"""


def test_two_demos_of_one_experiment_started_together_keep_their_own_run_folders(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    expected = {"pass": "PASS", "fail": "FAIL"}
    texts = {
        "pass": PASSING,
        "fail": SMALL.replace("EXPECT", "FAIL").replace("stage_duration: 3s", "stage_duration: 5s"),
    }
    processes = {}
    for which, text in texts.items():
        scenarios = tmp_path / which / "scenarios"
        _write(scenarios, "tiny-delay", text)
        repo = copy_sources(tmp_path / which / "repo")
        command = [sys.executable, "-c", DEMO, str(repo), str(runs), str(scenarios)]
        processes[which] = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    reported = {}
    for which, process in processes.items():
        out, err = process.communicate(timeout=BOUND_S)
        assert process.returncode == 0, f"{which}: {out[-3000:]}\n{err[-3000:]}"  # as designed: its own verdict
        found = re.search(r"re-judge: kfchaos verdict --run (\S+)", out)
        assert found, out[-3000:]
        reported[which] = Path(found[1])

    assert reported["pass"] != reported["fail"], reported
    folders = sorted(p for p in runs.iterdir() if p.name.startswith("tiny-delay-"))
    assert folders == sorted(reported.values()), folders  # two folders, each a run's own, none lost
    for which, folder in reported.items():
        run = layout.open_run(folder)
        assert run.verdict()["status"] == expected[which], (which, run.verdict()["reasons"])
        assert run.manifest()["run_id"] == folder.name
        slo = "p99_max: 20s" if which == "pass" else "p99_max: 1ms"
        assert slo in run.file(layout.EXPERIMENT).read_text(), which
        records = json.loads(run.file(layout.MANIFEST).read_text())["files"]
        assert layout.RECORDS in records
