"""`kfchaos status EXPERIMENT`: who holds the experiment's target now, who queues for it, and how the last runs
there ended (the target's lease: docs/running-on-a-cluster.md, "Runs that share a target"). It reads the lease
and changes none."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfchaos.cli import EXIT_PASS
from kfchaos.cli.flags import require_url
from kfchaos.netsafe import printable

if TYPE_CHECKING:
    from kfchaos.lease import LeaseRecord


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="who holds an experiment's target, who waits, the last runs there")
    parser.add_argument("experiment", type=Path, metavar="EXPERIMENT")
    parser.add_argument(
        "--target", default="", help="the target URL of a local run (`run --local --target`; default: its endpoint)"
    )
    parser.add_argument(
        "--local", action="store_true", help="read the local lock of the target URL, even where the run uses a cluster"
    )
    parser.add_argument("--json", action="store_true", help="the lease record as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.lease import clock
    from kfchaos.steps import seams
    from kfchaos.validate import load_experiment

    require_url("--target", args.target)
    experiment = load_experiment(args.experiment)
    if args.local:
        os.environ[seams.BACKEND_ENV] = "local"  # seams.uses_cluster: the local lock, whatever the faults
    lease = seams.target_lease(experiment, "kfchaos-status", args.target)
    record = lease.read()
    if args.json:
        print(json.dumps(record.to_object() if record else None, indent=2, sort_keys=True))
        return EXIT_PASS
    print(f"target: {lease.target} ({lease.store.where})")
    if record is None:
        print("free: no run has used it yet")
        return EXIT_PASS
    if record.held:
        times = f"since {clock(record.acquire_time)}, last renewed {clock(record.renew_time)}"
        print(f"{_holder(record)} {times} (lease {record.lease_duration}s)")
    else:
        print("free")
    for waiter in record.waiting:
        print(f"waiting: {waiter.describe()} since {clock(waiter.since)} (last said so {clock(waiter.seen)})")
    if record.history:
        print("last runs, newest last:")
    for ended in record.history:
        print(f"  {ended.run_id}" + (f" of {ended.experiment}" if ended.experiment else "")
              + f": {clock(ended.started)} .. {clock(ended.ended)}: {ended.outcome}")  # fmt: skip
    return EXIT_PASS


def _holder(record: LeaseRecord) -> str:
    """Who holds the target: a run, or a holder kfchaos did not write, named as such (LeaseRecord.foreign_holder)
    as a waiting run names it, never as a run: a Lease that merely names a run id is no run's turn."""
    foreign = record.foreign_holder()
    if foreign:
        return f"the lease {foreign}: held by '{printable(record.holder_identity[:80])}'"
    return f"held by {record.holder_info().describe()}"
