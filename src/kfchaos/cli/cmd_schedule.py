"""`kfchaos schedule sync FILE`: make KFP's recurring runs match the declarations in FILE."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_PASS


def register(subparsers: Any) -> None:
    from kfchaos.kfp.cliargs import add_connection_args

    parser = subparsers.add_parser("schedule", help="recurring runs as code")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    sync = actions.add_parser(
        "sync",
        help="create, replace or disable recurring runs to match FILE (6-field cron, max_concurrency 1, no catch-up)",
    )
    sync.add_argument("file", type=Path, metavar="FILE", help="e.g. manifests/schedules.yaml")
    sync.add_argument("--root", default=".", type=Path, help="repository root, for the versions lock file")
    add_connection_args(sync)
    sync.set_defaults(func=run_sync)


def run_sync(args: argparse.Namespace) -> int:
    from kfchaos.kfp import client as kfp_client
    from kfchaos.kfp.cliargs import connection_from
    from kfchaos.kfp.compile import LOCK_FILE
    from kfchaos.kfp.schedules import load_schedules, sync
    from kfchaos.kfp.versioning import read_lock

    schedules = load_schedules(args.file)  # validate before connecting: a bad file never half-applies
    versions = {name: entry.version for name, entry in read_lock(args.root.resolve() / LOCK_FILE).items()}
    report = sync(kfp_client.connect(connection_from(args)), schedules, versions)
    for line in report.lines():
        print(line)
    return EXIT_PASS
