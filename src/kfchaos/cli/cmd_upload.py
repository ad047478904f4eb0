"""`kfchaos upload`: upload every compiled pipeline version in the lock file; existing versions are left alone."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_PASS
from kfchaos.errors import KfchaosError


def register(subparsers: Any) -> None:
    from kfchaos.kfp.cliargs import add_connection_args

    parser = subparsers.add_parser(
        "upload",
        help="create each pipeline, or add the version named after its version; idempotent",
        description="Upload pipelines/compiled/<name>/<version>.yaml for every entry of pipelines/versions.lock.yaml.",
    )
    parser.add_argument("pipelines", nargs="*", metavar="NAME", help="only these pipelines (default: all)")
    parser.add_argument("--root", default=".", type=Path, help="repository root (default: current directory)")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.kfp import client as kfp_client
    from kfchaos.kfp.cliargs import connection_from
    from kfchaos.kfp.compile import LOCK_FILE
    from kfchaos.kfp.versioning import read_lock

    root = args.root.resolve()
    lock = read_lock(root / LOCK_FILE)
    if not lock:
        raise KfchaosError(f"{root / LOCK_FILE}: no pipelines; run `kfchaos compile` first")
    unknown = sorted(set(args.pipelines) - set(lock))
    if unknown:
        raise KfchaosError(f"not in {LOCK_FILE}: {', '.join(unknown)}; have: {', '.join(sorted(lock))}")
    client = kfp_client.connect(connection_from(args))
    for name in args.pipelines or sorted(lock):
        done = kfp_client.upload(client, lock[name], root)
        action = "created" if done.created else "exists "
        print(f"{action} {done.name} {done.version} (pipeline {done.pipeline_id}, version {done.version_id})")
    return EXIT_PASS
