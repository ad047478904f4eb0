"""Who may act on a target now: acquire (and queue), hold and renew, take over a dead holder, release.

The rules are client-go's leader election (kubernetes/client-go tools/leaderelection/leaderelection.go), applied to
a run that is many processes in turn (KFP runs each step in a pod of its own; kfp.local in a process of its own):

- tryAcquireOrRenew: a missing Lease is created with this run as holder; a Lease held by this run is renewed
  (renewTime); a Lease held by another is left alone until it expired; a free one (holderIdentity "", what
  client-go's release writes) is taken, leaseTransitions + 1.
- Expiry is measured on the waiter's own clock, never from the timestamps in the record (client-go's
  `observedTime`: "the implementation does not depend on their accuracy and only uses their change to indicate
  that another client has renewed"): a waiter takes over once it saw the holder's renewal unchanged for the
  record's leaseDurationSeconds. A waiter that just came sees a fresh observation, so it waits a full duration.
- Durations: leaseDurationSeconds > renew deadline > 1.2 x retry period (NewLeaderElector's checks, JitterFactor
  1.2); a holding process that could not renew for the renew deadline stops acting as the holder.
- release: holderIdentity "", leaseDurationSeconds 1, acquireTime and renewTime now (tryRelease).
- Every write is a PUT carrying the resourceVersion read, so two writers race safely: one gets 409 Conflict and
  reads again (the API server's optimistic concurrency; the local lock file plays it: kfchaos.lease.local).

What client-go has not, because a run is not a leader: the queue (each waiter in the `waiting` annotation, served in
order of arrival: a free or expired lease goes to the first waiter still saying it waits), the deadline (a waiter
gives up after `spec.safety.wait_for_target`, ending INCONCLUSIVE "target busy"), the takeover record (the dead
holder's run is written to the history, and the taker sweeps its chaos objects: kfchaos.steps.setup), and a run's
turn that is over: a run in the history (released, given up, taken over) never holds the target again, so a step
of a run that lost its turn or gave up waiting neither sends nor injects, even when the target is free by then.

What a Lease planted on the target gets (issue 46, class 1; docs/reliability.md, "round 4, class 1"): its
leaseDurationSeconds is honoured up to MAX_LEASE_DURATION, so one write cannot hold the target for years; its
times are never read for expiry, so a renewTime in the future holds nothing; a waiter's `seen` ahead of this clock by
more than MAX_CLOCK_SKEW is no live waiter; and a holder kfchaos did not write (LeaseRecord.foreign_holder) is named
as such and taken over by the same rules, but none of its objects are swept: a holder string is no evidence that a
run of that id held this target, and the run it names may be alive at another.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kfchaos.errors import KfchaosError
from kfchaos.lease.record import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Ended,
    LeaseRecord,
    RunInfo,
    clock,
    process_alive,
    this_host,
)
from kfchaos.netsafe import printable
from kfchaos.units import parse_duration

LEASE_DURATION_ENV = "KFCHAOS_LEASE_DURATION"  # e.g. 5m: the leaseDurationSeconds a holder writes
# How long a holder's lease lasts without renewal. Longer than the longest gap between two steps of a run that
# renew it (a KFP task is a driver pod then an executor pod; between two stages' replay pods run the collect and
# gate tasks: four pod starts, and collect's Prometheus queries, ~1-2 minutes on a busy cluster), so that a live
# run is never taken over between its steps; short enough that a dead run holds the target for minutes, not for
# the queue's whole deadline. client-go's 15 s suits a process that renews every 2 s; a run is silent between steps.
DEFAULT_LEASE_DURATION = 300
# The longest leaseDurationSeconds honoured from a record, and the longest KFCHAOS_LEASE_DURATION a run may write.
# client-go honours whatever the record says (leaderelection.go: observedTime + LeaseDurationSeconds; the API's
# LeaseSpec: "a duration that candidates for a lease need to wait to force acquire it"), so a Lease planted with
# 10^9 s would hold the target for 31 years with one write. kfchaos never writes more than this, so a longer one
# was written by something else: honoured only this long, the target is blocked at most an hour past its last
# change. A choice: twelve default leases, room for a KFCHAOS_LEASE_DURATION far above the gap between two steps.
MAX_LEASE_DURATION = 3600
# How far ahead of this host's clock a waiter's `seen` may be and still count (other hosts' clocks drift: NTP keeps
# them within a second; one a minute ahead is broken or forged). Further ahead, it would stay "live" for years.
MAX_CLOCK_SKEW = 60.0
MAX_TRANSITIONS = 2**31 - 1  # leaseTransitions is an int32 (k8s.io/api coordination/v1 LeaseSpec): + 1 stops here
JITTER_FACTOR = 1.2  # client-go leaderelection.go JitterFactor
MAX_RETRY_PERIOD = 10.0  # a waiter or a holding step polls at least this often
MAX_CONFLICTS = 20  # reads and writes in a row that another writer raced (409) before this one gives up


class Conflict(KfchaosError):
    """The record changed since it was read (HTTP 409 Conflict, or AlreadyExists on create)."""


class LeaseUnavailable(KfchaosError):
    """The record could not be read or written now (the API server did not answer, 5xx, 429); worth a retry."""


class LeaseStore(Protocol):
    """Where the Lease object lives: the API server (kfchaos.lease.kube) or a file (kfchaos.lease.local)."""

    @property
    def where(self) -> str: ...
    def get(self) -> dict[str, Any] | None: ...
    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def update(self, obj: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Timings:
    """client-go's three durations (leaderelection.go LeaderElectionConfig), in seconds."""

    lease_duration: int = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_LEASE_DURATION * 2 / 3
    retry_period: float = MAX_RETRY_PERIOD

    def __post_init__(self) -> None:
        # NewLeaderElector's checks, in its order and words.
        if self.lease_duration <= self.renew_deadline:
            raise KfchaosError("leaseDuration must be greater than renewDeadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise KfchaosError("renewDeadline must be greater than retryPeriod*JitterFactor")
        if self.lease_duration < 1 or self.renew_deadline <= 0 or self.retry_period <= 0:
            raise KfchaosError("lease durations must be greater than zero")

    @classmethod
    def for_duration(cls, seconds: int) -> Timings:
        """The durations Kubernetes recommends for client-go's leader election, scaled to `seconds`: 15 s / 10 s /
        2 s (kubernetes/kubernetes staging/src/k8s.io/component-base/config/v1alpha1/defaults.go,
        RecommendedDefaultLeaderElectionConfiguration): the renew deadline two thirds of the lease, the retry
        period two fifteenths, at most MAX_RETRY_PERIOD."""
        return cls(seconds, seconds * 2 / 3, min(MAX_RETRY_PERIOD, seconds * 2 / 15))

    @classmethod
    def from_environment(cls) -> Timings:
        text = os.environ.get(LEASE_DURATION_ENV, "")
        if not text:
            return cls.for_duration(DEFAULT_LEASE_DURATION)
        try:
            seconds = round(parse_duration(text))
        except ValueError as exc:
            raise KfchaosError(f"${LEASE_DURATION_ENV}: {exc}") from None
        if seconds < 2:
            raise KfchaosError(f"${LEASE_DURATION_ENV}={text}: a lease lasts at least 2s")
        if seconds > MAX_LEASE_DURATION:
            raise KfchaosError(
                f"${LEASE_DURATION_ENV}={text}: a lease lasts at most {MAX_LEASE_DURATION}s (other runs honour no "
                "longer one: kfchaos.lease.queue.MAX_LEASE_DURATION)"
            )
        return cls.for_duration(seconds)


@dataclass
class Acquired:
    """This run holds the target: `how` it got it (acquired, renewed, taken over) and, on a takeover, whom from."""

    record: LeaseRecord
    how: str
    previous: RunInfo | None = None  # the dead kfchaos run taken over from: its chaos objects are swept
    waited: float = 0.0


@dataclass
class Busy:
    """The queue's deadline passed with the target held by another run."""

    holder: RunInfo | None
    since: float | None
    waited: float
    held_by: str = ""  # who holds it, as TargetLease words it (a holder kfchaos did not write named as such)

    def reason(self) -> str:
        if self.holder is None:
            return "target busy: queued behind other runs"
        return f"target busy: {self.held_by or f'held by {self.holder.describe()} since {clock(self.since)}'}"


@dataclass
class Refused:
    """A step may not act on the target: another run holds it, or this run's turn is over."""

    reason: str


class TargetLease:
    """One run's view of one target's lease (`me` names the run)."""

    def __init__(
        self,
        store: LeaseStore,
        me: RunInfo,
        *,
        name: str,
        namespace: str,
        target: str,
        timings: Timings | None = None,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.me = me
        self.name = name
        self.namespace = namespace
        self.target = target
        self.timings = timings or Timings.from_environment()
        self._now = now
        self._monotonic = monotonic
        self._sleep = sleep

    @property
    def run_id(self) -> str:
        return self.me.run_id

    # ------------------------------------------------------------------ reading and writing

    def read(self) -> LeaseRecord | None:
        obj = self.store.get()
        return LeaseRecord.from_object(obj) if obj is not None else None

    def _mutate(self, change: Callable[[LeaseRecord | None], tuple[LeaseRecord | None, Any]]) -> Any:
        """Read, `change` (-> the record to write or None, and the result), write with the version read; again on
        Conflict, as client-go's callers do."""
        for _ in range(MAX_CONFLICTS):
            record = self.read()
            written, result = change(record)
            if written is None:
                return result
            try:
                if record is None:
                    self.store.create(replace(written, resource_version="").to_object())
                else:
                    self.store.update(replace(written, resource_version=record.resource_version).to_object())
            except Conflict:
                continue
            return result
        raise LeaseUnavailable(f"{self.store.where}: changed under every one of {MAX_CONFLICTS} writes in a row")

    def _fresh(self) -> LeaseRecord:
        return LeaseRecord(self.name, self.namespace, self.target)

    def _mine(self, record: LeaseRecord | None, at: float) -> LeaseRecord:
        """The record with this run as its new holder (client-go: leaseTransitions + 1 on every change of hands)."""
        base = record or self._fresh()
        holder = replace(self.me, since=at, seen=None)
        transitions = min(base.transitions + 1, MAX_TRANSITIONS) if record is not None else 0
        return replace(
            base,
            labels={**base.labels, LABEL_MANAGED_BY: MANAGED_BY},  # kfchaos's now, whoever wrote it before
            target=base.target or self.target,
            holder_identity=self.run_id,
            lease_duration=self.timings.lease_duration,
            acquire_time=at,
            renew_time=at,
            transitions=transitions,
            holder=holder,
        ).without_waiter(self.run_id)

    def _renewed(self, record: LeaseRecord, at: float, verdict: str = "") -> LeaseRecord:
        holder = record.holder_info()
        if verdict:
            holder = replace(holder, verdict=verdict)
        return replace(record, renew_time=at, lease_duration=self.timings.lease_duration, holder=holder)

    def _live_waiters(self, record: LeaseRecord, at: float) -> list[RunInfo]:
        """The queue in order of arrival: waiters that said they wait within a lease duration (their own clocks:
        a waiter whose process died drops out of the queue after that long)."""
        window = max(honoured(record), self.timings.lease_duration)
        live = [w for w in record.waiting if _recent(w.seen, at, window) and w.run_id != record.holder_identity]
        return sorted(live, key=lambda w: (w.since or 0.0, w.run_id))

    def _first_in_line(self, record: LeaseRecord, at: float) -> RunInfo | None:
        """The waiter ahead of this run, or None when this run is next."""
        queue = self._live_waiters(record, at)
        mine = next((w for w in queue if w.run_id == self.run_id), None)
        ahead = [
            w
            for w in queue
            if w.run_id != self.run_id
            and (mine is None or (w.since or 0.0, w.run_id) < (mine.since or 0.0, mine.run_id))
        ]
        return ahead[0] if ahead else None

    def _queued(self, record: LeaseRecord, at: float, since: float) -> LeaseRecord | None:
        """The record with this run in the queue, said at `at`; None when it said so recently (no write)."""
        mine = next((w for w in record.waiting if w.run_id == self.run_id), None)
        if mine is not None and _recent(mine.seen, at, self.timings.lease_duration / 3):
            return None
        entry = replace(self.me, since=mine.since if mine and mine.since else since, seen=at)
        return replace(record, waiting=[*(w for w in record.waiting if w.run_id != self.run_id), entry])

    # ------------------------------------------------------------------ the steps' calls

    def hold(self, verdict: str = "") -> Acquired | Refused:
        """One tryAcquireOrRenew for a step: renewed when this run holds the target, acquired when it is free and
        nobody queues for it (a step run on its own, or a Lease deleted by hand), refused otherwise. Never a
        takeover: only the queue (`acquire`) takes over, and sweeps the dead holder's faults first. `verdict`:
        written into the holder's details (the verdict step), for the history and `kfchaos status`."""

        def change(record: LeaseRecord | None) -> tuple[LeaseRecord | None, Acquired | Refused]:
            at = self._now()
            if record is None:
                mine = self._mine(None, at)
                return mine, Acquired(mine, "acquired")
            if record.holder_identity == self.run_id:
                renewed = self._renewed(record, at, verdict)
                return renewed, Acquired(renewed, "renewed")
            ended = record.ended(self.run_id)
            if ended is not None:
                return None, Refused(f"this run's turn at the target is over: {ended.outcome}")
            if record.held:
                return None, Refused(f"target busy: {self._held_by(record, at)}")
            ahead = self._first_in_line(record, at)
            if ahead is not None:
                return None, Refused(f"target free, but {ahead.describe()} queues for it")
            mine = self._mine(record, at)
            return mine, Acquired(mine, "acquired")

        result: Acquired | Refused = self._mutate(change)
        return result

    def acquire(self, wait: float, say: Callable[[str], None] = lambda line: None) -> Acquired | Busy:
        """Queue for the target up to `wait` seconds: Acquired (how, and the dead holder on a takeover), or Busy
        once the deadline passed (this run then leaves the queue, and the history says it gave up)."""
        started = self._monotonic()
        since = self._now()
        observed: tuple[Any, ...] | None = None
        observed_at = started
        said = ""
        last: LeaseRecord | None = None

        def change(record: LeaseRecord | None) -> tuple[LeaseRecord | None, Any]:
            nonlocal observed, observed_at, last
            at, mono = self._now(), self._monotonic()
            last = record
            if record is None:
                mine = self._mine(None, at)
                return mine, Acquired(mine, "acquired")
            if record.holder_identity == self.run_id:
                renewed = self._renewed(record, at)
                return renewed, Acquired(renewed, "renewed")
            ended = record.ended(self.run_id)
            if ended is not None:
                raise KfchaosError(f"this run's turn at the target is over: {ended.outcome}")
            ahead = self._first_in_line(record, at)
            if not record.held:
                if ahead is None:
                    mine = self._mine(record, at)
                    return mine, Acquired(mine, self._acquired_how(record))
                return self._queued(record, at, since), None
            if record.renewal() != observed:
                observed, observed_at = record.renewal(), mono
            dead = self._expired(record, mono - observed_at)
            if dead and ahead is None:
                return self._take_over(record, at, dead)
            return self._queued(record, at, since), None

        while True:
            try:
                result = self._mutate(change)
            except LeaseUnavailable as exc:  # the API did not answer this time: the deadline decides, not one error
                result = None
                say(f"the target's lease could not be read or written ({exc}); trying again")
            if isinstance(result, Acquired):
                result.waited = self._monotonic() - started
                return result
            waited = self._monotonic() - started
            line = self._waiting_line(last, wait)
            if line != said:
                say(line)
                said = line
            if waited >= wait:
                return self._give_up(last, waited)
            self._sleep(min(self.timings.retry_period, max(0.0, wait - waited)))

    def _take_over(self, record: LeaseRecord, at: float, dead: str) -> tuple[LeaseRecord, Acquired]:
        """This run the holder, the dead one in the history. `previous` (whose chaos objects the caller sweeps) only
        for a kfchaos run that held this Lease: a holder kfchaos did not write is named, and nothing of it swept."""
        mine = self._mine(record, at)
        holder = record.holder_info()
        foreign = record.foreign_holder()
        if not foreign:
            outcome = f"taken over by run {self.run_id} after {dead}"
            entry = Ended(holder.run_id, holder.experiment, holder.where, holder.since, at, outcome)
            return mine.with_history(entry), Acquired(mine, "taken over", previous=holder)
        named = f"'{printable(record.holder_identity[:80])}'"
        how = (
            f"taken over from {named} after {dead}; {self.store.where} {foreign}: none of its objects were "
            "swept (a holder kfchaos did not write is no run whose faults it may remove)"
        )
        outcome = f"taken over by run {self.run_id} after {dead}; {self.store.where} {foreign}"
        entry = Ended(record.holder_identity, "", "", record.acquire_time, at, outcome)
        return mine.with_history(entry), Acquired(mine, how)

    def _acquired_how(self, record: LeaseRecord) -> str:
        """How a free Lease was taken: "acquired", naming one that another wrote (kfchaos's from now on)."""
        foreign = record.not_kfchaos()
        return f"acquired; {self.store.where} {foreign} before" if foreign else "acquired"

    def _expired(self, record: LeaseRecord, unchanged_for: float) -> str:
        """Why the holder is dead ('' while it may live): its renewal unchanged for the record's own duration (at
        most MAX_LEASE_DURATION) on this clock, or (a local kfchaos run on this host) its owner process gone."""
        duration = honoured(record)
        if unchanged_for >= duration:
            capped = (
                f": its leaseDurationSeconds {record.lease_duration} is over the {MAX_LEASE_DURATION}s kfchaos honours"
                if record.lease_duration > MAX_LEASE_DURATION
                else ""
            )
            return f"its lease expired (not renewed for {duration}s{capped})"
        holder = record.holder_info()
        ours = not record.foreign_holder()  # a planted host and pid are no kfchaos run's process
        if ours and holder.host and holder.host == this_host() and holder.pid and not process_alive(holder.pid):
            return f"its process {holder.pid} on {holder.host} ended without releasing it"
        return ""

    def _held_by(self, record: LeaseRecord, at: float) -> str:
        """Who holds the target and since when, for a message: the run, or a holder kfchaos did not write named
        as such (with why). A time ahead of this clock is said to be: a planted one shows where it came from."""
        since = clock(record.acquire_time)
        if record.acquire_time is not None and record.acquire_time > at + MAX_CLOCK_SKEW:
            since += " (ahead of this host's clock)"
        foreign = record.foreign_holder()
        if foreign:
            named = f"'{printable(record.holder_identity[:80])}'"
            return f"{self.store.where} {foreign}: held by {named} since {since}"
        return f"held by {record.holder_info().describe()} since {since}"

    def _waiting_line(self, record: LeaseRecord | None, wait: float) -> str:
        if record is None:
            return f"waiting for the target ({self.store.where})"
        line = f"target busy: {self._held_by(record, self._now())}" if record.held else "target free, queued"
        queue = [w for w in self._live_waiters(record, self._now()) if w.run_id != self.run_id]
        if queue:
            line += f"; {len(queue)} other run(s) queued: " + ", ".join(w.run_id for w in queue[:5])
        return f"{line}; waiting up to {wait:g}s (spec.safety.wait_for_target)"

    def _give_up(self, record: LeaseRecord | None, waited: float) -> Busy:
        held = record if record is not None and record.held else None
        if held is None:
            busy = Busy(None, None, waited)
        else:
            busy = Busy(held.holder_info(), held.acquire_time, waited, self._held_by(held, self._now()))
        outcome = f"INCONCLUSIVE: gave up after waiting {waited:.0f}s; {busy.reason()}"

        def change(current: LeaseRecord | None) -> tuple[LeaseRecord | None, None]:
            if current is None:
                return None, None
            entry = Ended(self.run_id, self.me.experiment, self.me.where, None, self._now(), outcome)
            return current.without_waiter(self.run_id).with_history(entry), None

        # Unwritten, the queue forgets a waiter that stopped saying so; the step's own result says it gave up.
        with contextlib.suppress(KfchaosError):
            self._mutate(change)
        return busy

    def release(self) -> str:
        """Give the target back (client-go's release: holderIdentity "", leaseDurationSeconds 1), with this run
        and its verdict in the history; or leave the queue. What was done, as a line."""

        def change(record: LeaseRecord | None) -> tuple[LeaseRecord | None, str]:
            at = self._now()
            if record is None:
                return None, "no lease to release"
            if record.holder_identity == self.run_id:
                holder = record.holder_info()
                outcome = holder.verdict or "released without a verdict"
                entry = Ended(self.run_id, holder.experiment, holder.where, holder.since, at, outcome)
                freed = replace(
                    record, holder_identity="", lease_duration=1, acquire_time=at, renew_time=at, holder=None
                )
                return freed.without_waiter(self.run_id).with_history(entry), f"released {self.store.where}"
            if any(w.run_id == self.run_id for w in record.waiting):
                return record.without_waiter(self.run_id), f"left the queue of {self.store.where}"
            if record.held:
                return None, f"not released: {self.store.where} is held by run {record.holder_identity}"
            return None, f"not released: {self.store.where} is not held by this run"

        result: str = self._mutate(change)
        return result


def honoured(record: LeaseRecord) -> int:
    """The record's leaseDurationSeconds as a waiter honours it: at least 1 s, at most MAX_LEASE_DURATION."""
    return min(max(1, record.lease_duration), MAX_LEASE_DURATION)


def _recent(seen: float | None, at: float, window: float) -> bool:
    """Whether a time another process wrote (a waiter's `seen`) is within `window` before `at`, and not ahead of it
    by more than MAX_CLOCK_SKEW: a time in the future would otherwise stay recent for as long as it is ahead."""
    return seen is not None and -MAX_CLOCK_SKEW <= at - seen < window


class Renewal:
    """A step's hold on the target for as long as it runs: `hold()` on entry, then renewed every retry period on a
    thread of its own. `lost` says why the step no longer holds it: refused at entry or later (another run holds
    it, this run's turn is over), or no renewal for the renew deadline (client-go's leader then stops leading)."""

    def __init__(self, lease: TargetLease | None, verdict: str = "", lost: str | None = None) -> None:
        self.lease = lease
        self.verdict = verdict
        self.lost: str | None = lost
        self.held: Acquired | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def refused(cls, reason: str) -> Renewal:
        """A hold that never began (no lease could be found or made): `lost` says why."""
        return cls(None, lost=reason)

    def __enter__(self) -> Renewal:
        if self.lease is None:
            return self
        try:
            result = self.lease.hold(self.verdict)
        except KfchaosError as exc:
            self.lost = f"the target's lease could not be renewed: {exc}"
            return self
        if isinstance(result, Refused):
            self.lost = result.reason
            return self
        self.held = result
        self._thread = threading.Thread(target=self._renew, name="kfchaos-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None and self.lease is not None:
            self._thread.join(timeout=self.lease.timings.retry_period + 5)

    def _renew(self) -> None:
        assert self.lease is not None
        timings = self.lease.timings
        last_ok = time.monotonic()
        while not self._stop.wait(timings.retry_period):
            try:
                result = self.lease.hold()
            except KfchaosError as exc:
                if time.monotonic() - last_ok > timings.renew_deadline:
                    self.lost = f"the target's lease could not be renewed for {timings.renew_deadline:.0f}s: {exc}"
                    return
                continue
            if isinstance(result, Refused):
                self.lost = f"the target's lease was lost while this step ran: {result.reason}"
                return
            last_ok = time.monotonic()
