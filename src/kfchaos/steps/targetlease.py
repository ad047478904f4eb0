"""The run's turn at its target, step by step (kfchaos.lease has the rules).

- preflight acquires, queueing up to `spec.safety.wait_for_target`: a holder that stopped renewing is taken over
  once its lease expired, and its chaos objects are swept (by its run id) before this run does anything else;
  a deadline that passes leaves the run "target busy", and every later step then neither sends nor injects.
- every step that sends or injects holds the lease while it runs: renewed on entry and every retry period on a
  thread (`holding`); refused, it does nothing to the target and says why. Between two steps nobody renews: the
  lease lasts DEFAULT_LEASE_DURATION (kfchaos.lease.queue says why 5 minutes), longer than a gap between steps.
- the verdict step writes the verdict into the holder's details; the exit handler releases the lease, whatever
  happened, so the history shows how each run ended.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kfchaos.errors import KfchaosError
from kfchaos.lease import Acquired, Busy, Renewal, TargetLease, clock
from kfchaos.spec import Experiment
from kfchaos.steps import seams

# What the lease steps say (who holds the target, the wait, a takeover) starts with this, so that `kfchaos run
# --local` can show it beside the task lines (kfchaos.demo.runner.localrun.follow_output): a run that waits says why.
CONSOLE_MARK = "kfchaos target lease: "


def _say(line: str) -> None:
    print(CONSOLE_MARK + line, file=sys.stderr, flush=True)


def acquire(experiment: Experiment, run_id: str, target: str) -> dict[str, Any]:
    """The preflight's part: what it got (held, how, after how long; or busy, and why), and on a takeover whom
    from and what of theirs was swept. Raises when the lease cannot be used at all (RBAC, a broken record)."""
    lease = seams.target_lease(experiment, run_id, target)
    wait = experiment.spec.safety.wait_for_target
    result = lease.acquire(wait, _say)
    where = lease.store.where
    if isinstance(result, Busy):
        reason = f"{result.reason()} (waited {result.waited:.0f}s of spec.safety.wait_for_target {wait:g}s)"
        _say(reason + "; this run sends and injects nothing")
        return {"status": "busy", "reason": reason, "lease": where, "waited": result.waited}
    out: dict[str, Any] = {"status": "held", "how": result.how, "lease": where, "waited": result.waited}
    if result.previous is not None:
        out["took_over"] = _sweep_dead(experiment, run_id, result, lease)
    _say(f"holding {where} ({result.how} after {result.waited:.0f}s)")
    return out


def _sweep_dead(experiment: Experiment, run_id: str, result: Acquired, lease: TargetLease) -> dict[str, Any]:
    """Remove the dead holder's chaos objects (its run id labels them) that reach this target, before this run
    touches it. Only those: the Lease is evidence that the run held this target, not that it is dead everywhere. A
    Lease that copies kfchaos's whole record can name a run alive at another target (anyone who may update Leases
    can write one), and that run's objects there are left, named in "not_swept"."""
    dead = result.previous
    assert dead is not None
    taken: dict[str, Any] = {"run_id": dead.run_id, "experiment": dead.experiment, "where": dead.where,
                             "held_since": clock(dead.since)}  # fmt: skip
    try:
        swept = seams.fault_backend(experiment, run_id).sweep_at_target(dead.run_id)
    except KfchaosError as exc:
        raise KfchaosError(
            f"took over the target from run {dead.run_id}, whose lease expired, but could not remove its chaos "
            f"objects ({exc}); nothing of this run was sent or injected. Run `kfchaos cleanup --run-id "
            f"{dead.run_id}` with an operator's credentials"
        ) from None
    taken["swept"] = swept.deleted
    said = f"took over {lease.store.where} from run {dead.run_id}: its lease expired; removed {swept.deleted} of its"
    if swept.kept:
        taken["not_swept"] = [f"{name}: selects another target" for name in swept.kept]
        said += f" chaos objects, not swept (they select another target): {', '.join(swept.kept)}"
    else:
        said += " chaos objects"
    _say(said)
    return taken


@contextmanager
def holding(experiment: Experiment, run_id: str, target: str, verdict: str = "") -> Iterator[Renewal]:
    """The lease held for the block (renewed on a thread). `renewal.lost` is set when it is not, or stops being,
    this run's: the step must then neither send nor inject (and says why)."""
    try:
        lease = seams.target_lease(experiment, run_id, target)
    except KfchaosError as exc:
        renewal = Renewal.refused(f"the target's lease could not be used: {exc}")
        yield renewal
        return
    with Renewal(lease, verdict) as renewal:
        yield renewal


def note_verdict(experiment: Experiment, run_id: str, target: str, verdict: str) -> str:
    """The verdict into the holder's details (for the history and `kfchaos status`): what happened, as a line."""
    try:
        result = seams.target_lease(experiment, run_id, target).hold(verdict)
    except KfchaosError as exc:
        return f"verdict not written to the target's lease: {exc}"
    return "" if isinstance(result, Acquired) else f"verdict not written to the target's lease: {result.reason}"


def release(experiment: Experiment, run_id: str, target: str) -> str:
    """The exit handler's part: give the target back (or leave its queue). Never raises: the sweep matters more."""
    try:
        return seams.target_lease(experiment, run_id, target).release()
    except KfchaosError as exc:
        return f"the target's lease was not released ({exc}); it expires by itself"
