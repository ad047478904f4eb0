"""Two `kfchaos run --local` against one demo server (issue 37): the second, started while the first runs, queues
for the target's local lock (kfchaos.lease.local) and replays only after the first released it in its exit
handler, so neither measures the other's load or faults: their records' spans do not overlap. The whole pipeline
under kfp.local, the local fault backend (the demo's fault proxy), real processes and a real lock file."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kfchaos.demo.stack.demostack import DemoStack
from kfchaos.lease import Acquired, RunInfo, TargetLease
from kfchaos.lease.local import FileLeaseStore
from kfchaos.lease.record import this_host
from tests.kfp_glue.test_local_pipeline import SYNTHETIC, _env, _proxy_faults, _repo, _run_command, _run_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _served(stack: DemoStack) -> float:
    """Requests the demo server finished (its vllm:request_success counter, summed)."""
    with urllib.request.urlopen(f"{stack.server_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


def _run_folder(root: Path) -> Path:
    """The run's folder in runs/: named by its run id, which is its own pipeline root's name (the parent of
    kfp.local's run folder)."""
    return root / "runs" / _run_dir(root).parent.name


def _span(root: Path) -> tuple[float, float]:
    folder = _run_folder(root)
    sent = [s for s in pq.read_table(folder / "records.parquet", columns=["sent"]).column("sent").to_pylist() if s]
    assert sent, f"no request was sent by the run in {root}"
    return min(sent), max(sent)


def test_two_local_runs_against_one_demo_server_serialize(tmp_path: Path, stack: DemoStack) -> None:
    first_root, second_root = _repo(tmp_path / "a", SYNTHETIC), _repo(tmp_path / "b", SYNTHETIC)
    env = _env(stack)
    first = subprocess.Popen(
        _run_command(first_root, stack), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        time.sleep(5)  # as in the issue: the second started five seconds after the first
        second = subprocess.Popen(
            _run_command(second_root, stack), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            second_out, _ = second.communicate(timeout=600)
        finally:
            if second.poll() is None:
                second.kill()
        first_out, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    # No baseline here: each verdict is INCONCLUSIVE (exit 2) for that reason, neither is "target busy".
    assert first.returncode == 2 and "no baseline" in first_out, first_out[-3000:]
    assert second.returncode == 2 and "no baseline" in second_out, second_out[-3000:]
    # The second run said whom it waited for, on its console: the holder's run, where it runs, since when.
    waited = [line for line in second_out.splitlines() if "target  " in line and "target busy: held by run" in line]
    assert waited and "kfchaos run --local on" in waited[0] and str(first_root / "out") in waited[0], second_out
    assert " since " in waited[0] and "waiting up to 7200s (spec.safety.wait_for_target)" in waited[0]
    (first_start, first_end), (second_start, second_end) = _span(first_root), _span(second_root)
    assert first_end < second_start, ((first_start, first_end), (second_start, second_end))
    assert _served(stack) > 0  # the counter the next test reads counts these runs' requests


def test_a_local_run_still_queued_at_its_deadline_ends_inconclusive_target_busy_and_touches_nothing(
    tmp_path: Path, stack: DemoStack
) -> None:
    """Another run holds the target (this process, alive, its lease far from expiring): the run waits
    spec.safety.wait_for_target, then its verdict is INCONCLUSIVE "target busy", exit 2, with no request sent and
    no fault injected."""
    root = _repo(tmp_path, SYNTHETIC)
    experiment = root / "experiments/local-delay.yaml"
    experiment.write_text(
        experiment.read_text().replace("max_fault_duration: 10m", "max_fault_duration: 10m\n    wait_for_target: 3s")
    )
    store = FileLeaseStore.for_url(stack.target_url)
    holder = RunInfo("run-holding", "nightly", "a nightly run", host=this_host(), pid=os.getpid())
    lease = TargetLease(store, holder, name=store.folder.name, namespace="", target=stack.target_url)
    assert isinstance(lease.acquire(0), Acquired)
    served = _served(stack)
    try:
        done = subprocess.run(_run_command(root, stack), env=_env(stack), capture_output=True, text=True, timeout=600)
    finally:
        lease.release()
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    verdict_line = out.strip().splitlines()
    assert any(
        line.startswith("INCONCLUSIVE: target busy: held by run run-holding of nightly (a nightly run) since ")
        for line in verdict_line
    ), out[-3000:]
    folder = _run_folder(root)
    assert pq.read_table(folder / "records.parquet").num_rows == 0
    assert "- target busy: held by run run-holding of nightly" in (folder / "report.md").read_text()  # "## Why"
    assert _served(stack) == served  # the server finished not one request more
    assert _proxy_faults(stack) == []
