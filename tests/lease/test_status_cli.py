"""`kfchaos status`: who holds an experiment's target, who waits, how the last runs ended; read from the target's
local lock as real runs write it (kfchaos.lease), by the command in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kfchaos.lease import Acquired, Busy, RunInfo, TargetLease, Timings
from kfchaos.lease.local import FileLeaseStore

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = str(ROOT / "experiments" / "vllm-network-delay.yaml")
URL = "http://127.0.0.1:18001"


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kfchaos", "status", EXPERIMENT, "--local", "--target", URL, *args],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip


def lease(run_id: str, experiment: str) -> TargetLease:
    store = FileLeaseStore.for_url(URL)  # under KFCHAOS_LOCK_DIR, as the tests set it (tests/conftest.py)
    me = RunInfo(run_id, experiment, f"outputs of {run_id}")
    return TargetLease(store, me, name=store.folder.name, namespace="", target=URL, timings=Timings.for_duration(60))


def test_status_names_the_holder_the_queue_and_the_last_runs() -> None:
    free = status()
    assert free.returncode == 0 and "free: no run has used it yet" in free.stdout
    first, holder = lease("run-nightly", "nightly-delay"), lease("run-gate", "pr-gate")
    assert isinstance(first.acquire(0), Acquired)
    first.hold("PASS")  # the verdict step's note
    first.release()
    assert isinstance(holder.acquire(0), Acquired)
    assert isinstance(lease("run-late", "late").acquire(0.1), Busy)
    shown = status()
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"target: {URL} (lock ")
    assert lines[1].startswith("held by run run-gate of pr-gate (outputs of run-gate) since ")
    assert "  run-nightly of nightly-delay: " in shown.stdout and shown.stdout.count(": PASS") == 1
    assert "  run-late of late: " in shown.stdout and "gave up after waiting" in shown.stdout
    record = json.loads(status("--json").stdout)
    assert record["kind"] == "Lease" and record["spec"]["holderIdentity"] == "run-gate"
    holder.release()
