"""Runs that share a target never overlap: one lease per target, held by one run at a time.

A run acquires its target's lease before its first fault or request and gives it back in its exit handler; a run
that finds the target held queues for it up to `spec.safety.wait_for_target`, and takes over from a holder that
stopped renewing once its lease expired. The lease is a coordination.k8s.io/v1 Lease in the target's namespace
(kfchaos.lease.kube) for a run with a cluster, or the same record in a file keyed by the target URL under the
user's cache folder (kfchaos.lease.local) for a local run without one; the rules are one (kfchaos.lease.queue),
after client-go's leader election. docs/running-on-a-cluster.md, "Runs that share a target", says it for people.
"""

from kfchaos.lease.queue import (
    DEFAULT_LEASE_DURATION,
    LEASE_DURATION_ENV,
    Acquired,
    Busy,
    Conflict,
    LeaseStore,
    LeaseUnavailable,
    Refused,
    Renewal,
    TargetLease,
    Timings,
)
from kfchaos.lease.record import Ended, LeaseRecord, RunInfo, clock, lease_name, url_key

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "LEASE_DURATION_ENV",
    "Acquired",
    "Busy",
    "Conflict",
    "Ended",
    "LeaseRecord",
    "LeaseStore",
    "LeaseUnavailable",
    "Refused",
    "Renewal",
    "RunInfo",
    "TargetLease",
    "Timings",
    "clock",
    "lease_name",
    "url_key",
]
