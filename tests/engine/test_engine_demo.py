"""`kfchaos demo --engine vllm`: the demo's story told by the real vLLM engine in a memory cgroup.

The unsafe scenario through the whole command, as a user runs it (`--scenario unsafe`: the same path as the default
pair, one engine instead of two): the engine prefills the long-context burst in one step, the kernel OOM-kills its
worker, vLLM's API server exits 0, and the verdict FAILs naming the kill (abort.oom_kills, oom_kill_rate). Exit code
0: the scenario turned out as designed. The tuned scenario's PASS is not asserted here: it takes another ~4 minutes
of `make test`, and its drift limit (twice a ~0.06 s control P99) holds on a quiet machine (docs/demo.md "--engine
vllm"); the real node's case runs the same experiment to a PASS through KFP (tests/cluster/node/test_vllm_node.py,
`make e2e-local`). And where no memory cgroup can be made the command says why and starts nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kfchaos.cli import EXIT_USAGE
from kfchaos.cli import main as cli_main
from kfchaos.demo.stack import memcgroup
from kfchaos.demo.stack.vllmengine import EngineInstall
from tests.conftest import require_tool
from tests.engine.test_engine_death import require_cgroup

DEMO_TIMEOUT = 600  # the unsafe scenario alone, with its 90 s control and 90 s stage: ~4 min on 2 cores (docs/demo.md)


def _verdict(run_dir: Path) -> dict[str, object]:
    return dict(json.loads((run_dir / "verdict.json").read_text()))


def _checks(verdict: dict[str, object], status: str) -> set[str]:
    """The names of the stage checks with this status."""
    names = set()
    for stage in verdict.get("stages", []):  # type: ignore[attr-defined]
        names |= {check["name"] for check in stage["checks"] if check["status"] == status}
    return names


def test_unsafe_fails_naming_the_kernels_kill_of_the_engines_worker(
    vllm_install: EngineInstall, tmp_path: Path
) -> None:
    require_cgroup()
    require_tool("prometheus", "the demo's local Prometheus")
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "demo", "--engine", "vllm", "--scenario", "unsafe", "--runs", str(runs)],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "every scenario turned out as designed (unsafe FAIL)" in output, output[-4000:]
    folders = [Path(line.split("--run ", 1)[1].strip()) for line in done.stdout.splitlines() if "re-judge: " in line]
    assert len(folders) == 1, done.stdout
    unsafe = _verdict(folders[0])
    assert unsafe["status"] == "FAIL", done.stdout
    # The kernel's kill of VLLM::Worker, counted from the supervisor's kube-state-metrics/cAdvisor series although
    # vLLM's API server exited 0; the 500s (EngineDeadError) as failed requests.
    failed = _checks(unsafe, "FAIL")
    assert {"abort.oom_kills", "oom_kill_rate", "error_rate"} <= failed, failed
    kills = [int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines() if "OOM kills during the run:" in line]
    assert kills and kills[0] >= 1, done.stdout  # the cgroups' own oom_kill counters: the kernel's kills
    assert any("oom_kill_rate:" in line and "host-memory OOM kill(s)" in line for line in done.stdout.splitlines())
    assert any("error_rate:" in line and "5xx answers" in line for line in done.stdout.splitlines()), done.stdout


def test_without_a_memory_cgroup_it_says_so_and_starts_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No cgroup fs here (an empty folder stands for it): the command names why, exits 3, and no run folder is made."""
    monkeypatch.setattr(memcgroup, "ROOT", tmp_path / "no-cgroup-fs")
    runs = tmp_path / "runs"
    code = cli_main(["demo", "--engine", "vllm", "--runs", str(runs)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "cannot make a memory cgroup" in err and "no memory cgroup hierarchy" in err, err
    assert "nothing was started" in err
    assert not runs.exists() or not any(runs.iterdir())
    assert os.environ.get("KFCHAOS_FAULT_BACKEND") is None
