"""`kfchaos demo --engine vllm`: the demo's story told by the real vLLM engine in a memory cgroup.

The whole command, as a user runs it: the tuned settings (chunked prefill, prefix caching) PASS the long-context
bursts; the unsafe ones (prefill steps of up to 262 144 tokens, no prefix caching) FAIL, and the verdict names the
kernel's OOM kill of the engine's worker (abort.oom_kills, oom_kill_rate), though vLLM's API server exited 0. Exit
code 0: every scenario turned out as designed. And where no memory cgroup can be made it says why and starts nothing.
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
from kfchaos.demo import memcgroup
from kfchaos.demo.vllmengine import EngineInstall
from tests.conftest import require_tool
from tests.engine.test_engine_death import require_cgroup

DEMO_TIMEOUT = 900  # measured ~9 min on 2 cores shared with other engines (docs/demo.md "--engine vllm")


def _verdict(run_dir: Path) -> dict[str, object]:
    return dict(json.loads((run_dir / "verdict.json").read_text()))


def _checks(verdict: dict[str, object], status: str) -> set[str]:
    """The names of the stage checks with this status."""
    names = set()
    for stage in verdict.get("stages", []):  # type: ignore[attr-defined]
        names |= {check["name"] for check in stage["checks"] if check["status"] == status}
    return names


def test_unsafe_fails_on_the_workers_oom_kill_and_tuned_passes(vllm_install: EngineInstall, tmp_path: Path) -> None:
    require_cgroup()
    require_tool("prometheus", "the demo's local Prometheus")
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "demo", "--engine", "vllm", "--runs", str(runs)],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    output = done.stdout + done.stderr
    folders: dict[str, Path] = {}
    for line in done.stdout.splitlines():
        if "re-judge: kfchaos verdict --run " in line:
            folder = Path(line.split("--run ", 1)[1].strip())
            folders[folder.name] = folder
    assert len(folders) == 2, output[-6000:]
    # The summary lists unsafe, then tuned (the order they were asked for).
    unsafe_dir, tuned_dir = (folders[name] for name in folders)
    unsafe, tuned = _verdict(unsafe_dir), _verdict(tuned_dir)
    kills = [int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines() if "OOM kills during the run:" in line]
    assert len(kills) == 2 and kills[0] >= 1 and kills[1] == 0, done.stdout

    # unsafe: FAIL, and the verdict names the kernel's kill of VLLM::Worker, counted from the supervisor's
    # kube-state-metrics/cAdvisor series although vLLM's API server exited 0.
    assert unsafe["status"] == "FAIL", done.stdout
    failed = _checks(unsafe, "FAIL")
    assert {"abort.oom_kills", "oom_kill_rate"} <= failed, failed
    assert any("oom_kill_rate:" in line and "host-memory OOM kill(s)" in line for line in done.stdout.splitlines())

    # tuned: no OOM kill, no failed request. It PASSes when the machine lets it; on 2 cores shared with other
    # engines a multi-second stall of the whole machine during its control replay or its stage leaves the P99 checks
    # of a service answering in tens of milliseconds unknowable: INCONCLUSIVE (kfchaos.verdict.drift), never a PASS
    # it did not earn, and never a FAIL -- the demo then says the scenario did not turn out as designed (exit 1).
    assert tuned["status"] in ("PASS", "INCONCLUSIVE"), done.stdout
    assert not _checks(tuned, "FAIL"), _checks(tuned, "FAIL")
    assert "oom_kill_rate" not in _checks(tuned, "INCONCLUSIVE") | _checks(tuned, "FAIL")
    assert "error_rate" not in _checks(tuned, "INCONCLUSIVE")
    if tuned["status"] == "PASS":
        assert done.returncode == 0, output[-6000:]
        assert "every scenario turned out as designed (unsafe FAIL, tuned PASS)" in output, output[-4000:]
    else:
        assert _checks(tuned, "INCONCLUSIVE") <= {"p99_drift", "p99", "ttft_p99"}, done.stdout
        assert done.returncode == 1, output[-6000:]
        assert "tuned: expected PASS, got INCONCLUSIVE" in output, output[-4000:]


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
