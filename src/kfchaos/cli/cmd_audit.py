"""`kfchaos audit verify RECORD|DIR`: recompute the hashes in a run's audit record, or check a whole run folder
(kfchaos.rundir.verify: its seal, its audit record against its files, and its verdict re-judged)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("audit", help="audit records of runs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    verify = actions.add_parser(
        "verify",
        help="recompute every hash in RECORD, or check a run folder DIR: every file's hash, the audit record, "
        "the verdict re-judged (exit 0 ok, 1 mismatch, 3 unreadable)",
    )
    verify.add_argument("record", type=Path, metavar="RECORD|DIR")
    verify.add_argument(
        "--root", default=".", type=Path, help="repository with pipelines/compiled/, to check the IR hash"
    )
    verify.add_argument("--json", action="store_true", help="one JSON document on stdout: ok and each finding")
    verify.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    from kfchaos.audit import load_record, verify

    if args.record.is_dir():
        return _verify_folder(args)
    findings = verify(load_record(args.record), root=args.root.resolve())
    if args.json:
        from kfchaos.cli.jsonout import emit

        emit(
            {
                "record": str(args.record),
                "ok": all(f.ok for f in findings),
                "findings": [{"what": f.what, "ok": f.ok, "detail": f.detail} for f in findings],
            }
        )
        return EXIT_PASS if all(f.ok for f in findings) else EXIT_FAIL
    for finding in findings:
        print(finding)
    return EXIT_PASS if all(f.ok for f in findings) else EXIT_FAIL


def _verify_folder(args: argparse.Namespace) -> int:
    from kfchaos import rundir, runseal

    findings = rundir.verify(rundir.open_run(args.record))
    ok = all(f.ok for f in findings)
    proves = runseal.proves(findings)
    if args.json:
        from kfchaos.cli.jsonout import emit

        emit(
            {
                "folder": str(args.record),
                "ok": ok,
                "findings": [{"what": f.what, "ok": f.ok, "detail": f.detail} for f in findings],
                "proves": proves,
            }
        )
    else:
        for finding in findings:
            print(finding)
        for line in proves:
            print(line)
    return EXIT_PASS if ok else EXIT_FAIL
