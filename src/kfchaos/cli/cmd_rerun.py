"""`kfchaos rerun RECORD --host URL`: resubmit the pipeline version a run used, with the same parameters."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS


def register(subparsers: Any) -> None:
    from kfchaos.kfp.cliargs import add_connection_args

    parser = subparsers.add_parser("rerun", help="resubmit a run from its audit record (same version and parameters)")
    parser.add_argument("record", type=Path, metavar="RECORD")
    parser.add_argument("--run-name", help="default: rerun-<original run id>")
    parser.add_argument("--kfp-experiment", default="kfchaos", help="KFP experiment (run folder)")
    add_connection_args(parser, required=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.audit import load_record, verify
    from kfchaos.kfp import client as kfp_client
    from kfchaos.kfp.cliargs import connection_from

    record = load_record(args.record)
    # A record that fails its own hashes is not evidence of anything; rerunning it would launder it.
    broken = [f for f in verify(record) if not f.ok]
    if broken:
        for finding in broken:
            print(finding, file=sys.stderr)
        print("kfchaos rerun: refusing a record whose hashes do not verify", file=sys.stderr)
        return EXIT_FAIL
    pipeline = record["pipeline"]
    run_id = kfp_client.submit(
        kfp_client.connect(connection_from(args)),
        pipeline["name"],
        pipeline["version"],
        dict(record["parameters"]),
        run_name=args.run_name or f"rerun-{record['run']['id']}",
        kfp_experiment=args.kfp_experiment,
    )
    print(f"submitted run {run_id} (rerun of {record['run']['id']}: {pipeline['name']} {pipeline['version']})")
    return EXIT_PASS
