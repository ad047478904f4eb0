"""`kfchaos run --local` fails fast: one line on stderr, exit 3, before kfp.local starts a task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXPERIMENTS

ROOT = EXPERIMENTS.parent


def run_local(experiment: str, env: dict[str, str], tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KFCHAOS_", "KUBECONFIG"))}
    clean["HOME"] = str(tmp_path)  # no ~/.kube/config
    return subprocess.run(
        [sys.executable, "-m", "kfchaos", "run", str(EXPERIMENTS / experiment), "--local", "--root", str(ROOT),
         "--output", str(tmp_path / "out"), *extra],
        capture_output=True, text=True, check=False, env={**clean, **env}, timeout=120,
    )  # fmt: skip


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_no_cluster_access_is_one_line_and_no_task_runs(tmp_path: Path) -> None:
    result = run_local("vllm-network-delay.yaml", {}, tmp_path)
    line = _one_line(result)
    assert "no cluster access for fault(s) serving-delay" in line and "kfchaos demo up" in line
    assert not (tmp_path / "out").exists()  # kfp.local never started


def test_a_fault_the_local_backend_cannot_do_is_refused(tmp_path: Path) -> None:
    result = run_local("vllm-memory-stress.yaml", {"KFCHAOS_FAULT_BACKEND": "local"}, tmp_path)
    assert "cannot inject memory-toward-limit (stress-memory)" in _one_line(result)


def test_a_dead_fault_proxy_is_refused(tmp_path: Path) -> None:
    env = {"KFCHAOS_FAULT_BACKEND": "local", "KFCHAOS_FAULT_PROXY": "http://127.0.0.1:9", "KFCHAOS_DEMO_STATE": "x"}
    assert "the fault proxy" in _one_line(run_local("vllm-network-delay.yaml", env, tmp_path))


def test_a_target_that_refuses_connections_is_refused(tmp_path: Path) -> None:
    # Only a traffic-side fault: no backend needed, so the target is what fails.
    result = run_local(
        "vllm-long-context-burst.yaml", {"KFCHAOS_FAULT_BACKEND": "local"}, tmp_path, "--target", "http://127.0.0.1:9"
    )
    assert "target http://127.0.0.1:9 does not accept connections" in _one_line(result)
