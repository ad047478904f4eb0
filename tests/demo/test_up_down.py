"""`kfchaos demo up` leaves the stack running and prints what to export; `down` stops every process of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path


def kfchaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kfchaos", *args], capture_output=True, text=True, check=False, timeout=180
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}/status").exists() else ""
    return "State:\tZ" not in status


def test_up_prints_the_exports_and_run_line_and_down_stops_everything(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    started = kfchaos("demo", "up", "--no-baseline", "--runs", str(runs))
    state_file = runs / ".work" / "demo-up.json"
    try:
        assert started.returncode == 0, started.stderr
        state = json.loads(state_file.read_text())
        out = started.stdout
        assert "export KFCHAOS_FAULT_BACKEND=local" in out
        assert f"export KFCHAOS_FAULT_PROXY={state['control']}" in out
        assert f"--local --target {state['target']}" in out and "kfchaos demo down" in out
        assert all(_alive(pid) for pid in state["pids"])
        # The same environment in a file to `source`: a shell that sources it has what `run --local` needs.
        env_file = runs / ".work" / "demo-up.env"
        assert f"source {env_file}" in out
        shell = subprocess.run(
            ["bash", "-c", f"source {env_file} && echo $KFCHAOS_FAULT_BACKEND $KFCHAOS_FAULT_PROXY $KFCHAOS_TARGET"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            env={"PATH": os.environ["PATH"]},
        )
        assert shell.stdout.split() == ["local", state["control"], state["target"]]
        # The stack answers through the fault proxy, as `run --local` will use it.
        with urllib.request.urlopen(f"{state['target']}/health", timeout=10) as response:
            assert response.status == 200
        again = kfchaos("demo", "up", "--no-baseline", "--runs", str(runs))
        assert again.returncode == 0 and json.loads(state_file.read_text())["pids"] == state["pids"]
    finally:
        stopped = kfchaos("demo", "down", "--runs", str(runs))
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not state_file.exists() and not env_file.exists()
    assert not any(_alive(pid) for pid in state["pids"])
    server_state = Path(state["server_state"])  # the supervisor removes it when it stops cleanly
    server = json.loads(server_state.read_text()).get("pid") if server_state.exists() else None
    assert not server or not _alive(int(server))
    assert "no demo stack was up" in kfchaos("demo", "down", "--runs", str(runs)).stdout
