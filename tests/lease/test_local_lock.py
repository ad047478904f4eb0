"""The target's lease in a lock file (kfchaos.lease.local) under the rules of kfchaos.lease.queue: real files, real
flock, real processes. The same rules on the real API server: tests/cluster/test_target_lease_real.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from kfchaos.lease import Acquired, Busy, Refused, RunInfo, TargetLease, Timings
from kfchaos.lease.local import FileLeaseStore, folder_for
from kfchaos.lease.record import this_host

URL = "http://127.0.0.1:18000"
SHORT = Timings.for_duration(2)  # a holder is dead after 2 s unrenewed; waiters poll every 0.27 s


def lease_for(folder: Path, run_id: str, timings: Timings = SHORT, **info: object) -> TargetLease:
    store = FileLeaseStore(folder)
    me = RunInfo(run_id, experiment=f"exp-{run_id}", where=f"outputs of {run_id}", **info)  # type: ignore[arg-type]
    return TargetLease(store, me, name=folder.name, namespace="", target=URL, timings=timings)


def test_one_url_written_two_ways_is_one_lock(tmp_path: Path) -> None:
    assert folder_for("http://Demo:80/", tmp_path) == folder_for("http://demo", tmp_path)
    assert folder_for("http://demo:8080", tmp_path) != folder_for("http://demo", tmp_path)


def test_a_second_run_finds_the_target_busy_names_the_holder_and_gives_up_at_its_deadline(tmp_path: Path) -> None:
    first, second = lease_for(tmp_path, "run-a"), lease_for(tmp_path, "run-b")
    assert isinstance(first.acquire(0), Acquired)
    said: list[str] = []
    busy = second.acquire(0.5, said.append)
    assert isinstance(busy, Busy)
    assert busy.reason().startswith("target busy: held by run run-a of exp-run-a (outputs of run-a) since ")
    assert any("held by run run-a" in line and "waiting up to 0.5s" in line for line in said)
    record = first.read()
    assert record is not None and record.holder_identity == "run-a"
    (gave_up,) = record.history
    assert gave_up.run_id == "run-b" and gave_up.outcome.startswith("INCONCLUSIVE: gave up after waiting")
    # Its turn is over: a later step of the run that gave up neither sends nor injects, even once the target is free.
    assert first.release().startswith("released")
    refused = second.hold()
    assert isinstance(refused, Refused) and "turn at the target is over" in refused.reason


def test_a_waiting_run_gets_the_target_once_the_holder_releases_it(tmp_path: Path) -> None:
    first, second = lease_for(tmp_path, "run-a"), lease_for(tmp_path, "run-b")
    assert isinstance(first.acquire(0), Acquired)
    released = threading.Timer(1.0, first.release)
    released.start()
    got = second.acquire(30)
    released.join()
    assert isinstance(got, Acquired) and got.how == "acquired" and got.previous is None
    assert got.waited >= 0.9
    record = second.read()
    assert record is not None and record.holder_identity == "run-b" and record.transitions == 1
    assert [e.run_id for e in record.history] == ["run-a"]


def test_a_holder_that_stops_renewing_is_taken_over_once_its_lease_expired(tmp_path: Path) -> None:
    dead, taker = lease_for(tmp_path, "run-dead"), lease_for(tmp_path, "run-taker")
    assert isinstance(dead.acquire(0), Acquired)
    got = taker.acquire(30)
    assert isinstance(got, Acquired) and got.how == "taken over"
    assert got.previous is not None and got.previous.run_id == "run-dead"
    assert got.waited >= SHORT.lease_duration  # a full duration of the taker's own clock, never less
    record = taker.read()
    assert record is not None and record.holder_identity == "run-taker"
    assert "taken over by run run-taker" in record.history[-1].outcome
    refused = dead.hold()  # the dead run, had it only paused, no longer acts on the target
    assert isinstance(refused, Refused)


def test_a_live_holder_that_renews_is_never_taken_over(tmp_path: Path) -> None:
    holder, waiter = lease_for(tmp_path, "run-live"), lease_for(tmp_path, "run-waiter")
    assert isinstance(holder.acquire(0), Acquired)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(SHORT.retry_period):
            holder.hold()

    thread = threading.Thread(target=renew)
    thread.start()
    try:
        busy = waiter.acquire(3 * SHORT.lease_duration)
    finally:
        stop.set()
        thread.join()
    assert isinstance(busy, Busy) and busy.holder is not None and busy.holder.run_id == "run-live"


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kfchaos.lease import RunInfo, TargetLease, Timings
    from kfchaos.lease.local import FileLeaseStore
    import os, socket
    store = FileLeaseStore(Path(sys.argv[1]))
    me = RunInfo("run-killed", host=socket.gethostname(), pid=os.getpid())
    lease = TargetLease(store, me, name="x", namespace="", target="t", timings=Timings.for_duration(600))
    lease.acquire(0)
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_sigkilled_local_holder_on_this_host_is_taken_over_without_waiting_out_its_lease(tmp_path: Path) -> None:
    """A local run names its process: once that process is gone the lock is dead, whatever its duration (600 s)."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        taker = lease_for(tmp_path, "run-after", Timings.for_duration(600))
        assert isinstance(taker.acquire(0), Busy)  # alive: held
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    got = lease_for(tmp_path, "run-after2", Timings.for_duration(600)).acquire(30)
    assert isinstance(got, Acquired) and got.how == "taken over"
    assert got.previous is not None and got.previous.run_id == "run-killed" and got.previous.host == this_host()


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]"])
def test_a_lock_file_that_is_not_a_lease_is_a_clear_error_naming_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "lease.json").write_bytes(content)
    with pytest.raises(Exception, match=r"lease\.json.*remove it once no run uses the target"):
        lease_for(tmp_path, "run-a").acquire(0)
