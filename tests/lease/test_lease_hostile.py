"""Leases planted on the target (issue 46, class 1), on the rules of kfchaos.lease.queue with a clock the test turns:
a holder that never renews, a leaseDurationSeconds of 10^9, times in the future, a holder string made to look like a
run, a Lease that is not kfchaos's. The same attacks on the real kube-apiserver, through the preflight step:
tests/cluster/test_lease_hostile_real.py."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from kfchaos.errors import KfchaosError
from kfchaos.lease import Acquired, Busy, Conflict, LeaseRecord, RunInfo, TargetLease, Timings
from kfchaos.lease.queue import MAX_CLOCK_SKEW, MAX_LEASE_DURATION, MAX_TRANSITIONS
from kfchaos.lease.record import micro_time, this_host

START = 1_800_000_000.0  # the wall clock at the test's start (2027-01-15)
SHORT = Timings.for_duration(4)  # this run's own lease: 4 s; it polls every 0.53 s


class Clock:
    """Wall and monotonic time that move only when the lease sleeps."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def now(self) -> float:
        return START + self.elapsed

    def monotonic(self) -> float:
        return self.elapsed

    def sleep(self, seconds: float) -> None:
        self.elapsed += seconds


class MemoryStore:
    """The API server's part for one Lease: create once, update only with the resourceVersion last given."""

    where = "Lease llm-serving/kfchaos-target-0123456789abcdef"

    def __init__(self, obj: dict[str, Any] | None = None) -> None:
        self.obj: dict[str, Any] | None = None
        self.version = 0
        if obj is not None:
            self.create(obj)

    def get(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.obj is not None:
            raise Conflict("already exists")
        return self._store(obj)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        if obj["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("changed")
        return self._store(obj)

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.obj = copy.deepcopy(obj)
        self.obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.obj)


def planted(
    holder: str = "leader-7f9c",
    duration: int = 4,
    renew: float = START,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    transitions: int = 3,
) -> dict[str, Any]:
    """A Lease as another writer leaves it: no kfchaos label or annotations unless given."""
    meta: dict[str, Any] = {"name": "kfchaos-target-0123456789abcdef", "namespace": "llm-serving"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": micro_time(renew),
            "renewTime": micro_time(renew), "leaseTransitions": transitions}  # fmt: skip
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def kfchaos_holder(run_id: str, **info: Any) -> dict[str, Any]:
    """A Lease as a kfchaos run that took it writes it (then died): label, holder annotation."""
    annotations = {"kfchaos.io/holder": json.dumps({"run_id": run_id, "since": START, **info})}
    return planted(run_id, labels={"app.kubernetes.io/managed-by": "kfchaos"}, annotations=annotations)


def waiter(store: MemoryStore, clock: Clock, sleep: Callable[[float], None] | None = None) -> TargetLease:
    me = RunInfo("run-waiter", "exp-waiter", "KFP run run-waiter", namespaces=["llm-serving"])
    return TargetLease(
        store, me, name="kfchaos-target-0123456789abcdef", namespace="llm-serving", target="pods in llm-serving",
        timings=SHORT, now=clock.now, monotonic=clock.monotonic, sleep=sleep or clock.sleep,
    )  # fmt: skip


def billion_seconds() -> MemoryStore:
    obj = kfchaos_holder("run-dead")
    obj["spec"]["leaseDurationSeconds"] = 10**9
    return MemoryStore(obj)


def test_a_duration_of_a_billion_seconds_is_honoured_for_max_lease_duration_only() -> None:
    busy = waiter(billion_seconds(), Clock()).acquire(MAX_LEASE_DURATION - 60)  # a deadline before the cap: given up
    assert isinstance(busy, Busy) and busy.reason().startswith("target busy: held by run run-dead since ")
    store = billion_seconds()
    got = waiter(store, Clock()).acquire(2 * MAX_LEASE_DURATION)
    assert isinstance(got, Acquired) and got.how == "taken over"
    assert MAX_LEASE_DURATION <= got.waited < MAX_LEASE_DURATION + SHORT.retry_period + 1
    outcome = LeaseRecord.from_object(store.get()).history[-1].outcome
    assert f"its leaseDurationSeconds 1000000000 is over the {MAX_LEASE_DURATION}s kfchaos honours" in outcome


def test_a_renew_time_in_the_future_holds_nothing_past_the_duration() -> None:
    """Expiry is measured on the waiter's clock (client-go's observedTime), never from the record's times: a
    renewTime a century ahead expires as any other, and the message says the time is ahead of this clock."""
    store, clock = MemoryStore(kfchaos_holder("run-dead")), Clock()
    ahead = micro_time(START + 100 * 365 * 86400)
    store.obj["spec"].update(renewTime=ahead, acquireTime=ahead)  # type: ignore[index]
    said: list[str] = []
    got = waiter(store, clock).acquire(60, said.append)
    assert isinstance(got, Acquired) and got.how == "taken over" and got.previous is not None
    assert SHORT.lease_duration <= got.waited < SHORT.lease_duration + 1
    assert "(ahead of this host's clock)" in said[0]


def test_a_waiter_seen_in_the_future_is_no_live_waiter() -> None:
    """A planted queue entry whose `seen` is far ahead would stay "live" for as long; past the skew it is none."""
    far = {"run_id": "run-ghost", "since": 0.0, "seen": START + 10**9}
    near = {"run_id": "run-near", "since": 0.0, "seen": START + MAX_CLOCK_SKEW / 2}
    free = planted("", labels={"app.kubernetes.io/managed-by": "kfchaos"},
                   annotations={"kfchaos.io/waiting": json.dumps([far])})  # fmt: skip
    got = waiter(MemoryStore(free), Clock()).acquire(0)
    assert isinstance(got, Acquired) and got.how == "acquired" and got.waited == 0
    # One within the skew is a waiter like any other, and first in line: this run waits behind it.
    skewed = planted("", labels={"app.kubernetes.io/managed-by": "kfchaos"},
                     annotations={"kfchaos.io/waiting": json.dumps([near])})  # fmt: skip
    assert isinstance(waiter(MemoryStore(skewed), Clock()).acquire(1), Busy)


def test_a_lease_kfchaos_did_not_write_is_named_as_such_and_its_holder_never_swept() -> None:
    store, clock = MemoryStore(planted("leader-7f9c", labels={"app": "other"}, annotations={"other/x": "1"})), Clock()
    said: list[str] = []
    got = waiter(store, clock).acquire(60, said.append)
    assert isinstance(got, Acquired) and got.previous is None  # nothing for the caller to sweep
    assert got.how.startswith("taken over from 'leader-7f9c' after its lease expired")
    assert f"{MemoryStore.where} is not kfchaos's (it has no label app.kubernetes.io/managed-by=kfchaos)" in got.how
    assert "none of its objects were swept" in got.how
    assert said[0].startswith(f"target busy: {MemoryStore.where} is not kfchaos's (it has no label ")
    assert "held by 'leader-7f9c' since " in said[0]
    record = LeaseRecord.from_object(store.get())
    assert record.labels == {"app": "other", "app.kubernetes.io/managed-by": "kfchaos"}  # the other's label kept
    assert record.annotations == {"other/x": "1"}
    assert record.history[-1].run_id == "leader-7f9c" and "is not kfchaos's" in record.history[-1].outcome


def test_a_renewing_holder_kfchaos_did_not_write_makes_a_run_give_up_at_its_deadline_naming_it() -> None:
    store, clock = MemoryStore(planted("leader-7f9c", labels={"app": "other"})), Clock()

    def renewing(seconds: float) -> None:  # the other writer renews between the waiter's polls
        clock.sleep(seconds)
        obj = store.get()
        assert obj is not None
        obj["spec"]["renewTime"] = micro_time(clock.now())
        store.update(obj)

    busy = waiter(store, clock, renewing).acquire(30)
    assert isinstance(busy, Busy) and 30 <= busy.waited < 31
    assert busy.reason().startswith(f"target busy: {MemoryStore.where} is not kfchaos's")
    record = LeaseRecord.from_object(store.get())
    assert record.holder_identity == "leader-7f9c" and record.labels == {"app": "other"}  # queued, not taken
    assert "is not kfchaos's" in record.history[-1].outcome  # the run that gave up says why


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        ({}, "names a holder kfchaos did not write (kfchaos.io/holder does not name 'run-live-b')"),
        (
            {"kfchaos.io/holder": json.dumps({"run_id": "run-other", "experiment": "x"})},
            "names a holder kfchaos did not write (kfchaos.io/holder does not name 'run-live-b')",
        ),
    ],
)
def test_a_holder_string_made_to_look_like_a_run_is_named_and_never_swept(
    annotations: dict[str, str], why: str
) -> None:
    """A kfchaos-labelled Lease whose holderIdentity names a run (here one alive at another target) that the
    holder annotation does not: taken over once expired, its objects left alone."""
    obj = planted("run-live-b", labels={"app.kubernetes.io/managed-by": "kfchaos"}, annotations=annotations)
    got = waiter(MemoryStore(obj), Clock()).acquire(60)
    assert isinstance(got, Acquired) and got.previous is None and why in got.how


def test_a_holder_that_is_no_run_id_is_never_swept() -> None:
    """A holder string that is not a label value would reach the sweep's label selector (which refuses it and
    stops the run): it is named, and nothing is swept."""
    obj = kfchaos_holder("run-x,kfchaos.io/run-id!=y")
    got = waiter(MemoryStore(obj), Clock()).acquire(60)
    assert isinstance(got, Acquired) and got.previous is None
    assert "names a holder that is no kfchaos run id ('run-x,kfchaos.io/run-id!=y' is not a Kubernetes" in got.how


def test_a_dead_kfchaos_holder_is_still_taken_over_and_swept() -> None:
    got = waiter(MemoryStore(kfchaos_holder("run-dead", experiment="e")), Clock()).acquire(60)
    assert isinstance(got, Acquired) and got.how == "taken over"
    assert got.previous is not None and got.previous.run_id == "run-dead"


def test_a_planted_process_on_this_host_takes_nothing_over_early() -> None:
    """A local kfchaos run's dead process frees its lock at once; a host and pid planted in a Lease kfchaos did not
    write do not: it expires by its duration."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)
    annotations = {"kfchaos.io/holder": json.dumps({"run_id": "run-p", "host": this_host(), "pid": pid})}
    foreign = waiter(MemoryStore(planted("run-p", annotations=annotations)), Clock()).acquire(60)
    assert isinstance(foreign, Acquired) and foreign.waited >= SHORT.lease_duration
    store = MemoryStore(kfchaos_holder("run-p", host=this_host(), pid=pid))
    local = waiter(store, Clock()).acquire(60)
    assert isinstance(local, Acquired) and local.waited == 0
    assert f"its process {pid} on {this_host()} ended" in LeaseRecord.from_object(store.get()).history[-1].outcome


def test_a_free_lease_kfchaos_did_not_write_is_acquired_and_named() -> None:
    got = waiter(MemoryStore(planted("", labels={"app": "other"})), Clock()).acquire(0)
    assert isinstance(got, Acquired) and got.how == f"acquired; {MemoryStore.where} is not kfchaos's (it has no " \
        "label app.kubernetes.io/managed-by=kfchaos) before"  # fmt: skip
    assert got.record.labels["app.kubernetes.io/managed-by"] == "kfchaos"


def test_transitions_at_the_int32_ceiling_stay_there() -> None:
    store = MemoryStore(kfchaos_holder("run-dead"))
    store.obj["spec"]["leaseTransitions"] = MAX_TRANSITIONS  # type: ignore[index]
    got = waiter(store, Clock()).acquire(60)
    assert isinstance(got, Acquired) and LeaseRecord.from_object(store.get()).transitions == MAX_TRANSITIONS


def test_a_lease_duration_over_the_cap_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFCHAOS_LEASE_DURATION", "2h")
    with pytest.raises(KfchaosError, match=r"KFCHAOS_LEASE_DURATION=2h: a lease lasts at most 3600s"):
        Timings.from_environment()
    monkeypatch.setenv("KFCHAOS_LEASE_DURATION", "1h")
    assert Timings.from_environment().lease_duration == MAX_LEASE_DURATION
