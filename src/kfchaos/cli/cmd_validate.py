"""`kfchaos validate EXPERIMENT...`: every problem in every file, as FILE:LINE: field.path: message."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.errors import SpecError
from kfchaos.spec import load_experiment


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="check experiment files; errors as FILE:LINE: field: message")
    parser.add_argument("experiments", nargs="+", metavar="EXPERIMENT")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    failed = False
    for path in args.experiments:
        try:
            experiment = load_experiment(path)
        except SpecError as exc:
            failed = True
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        if not args.quiet:
            meta = experiment.metadata
            print(f"{path}: ok ({meta.name} {meta.version}, {len(experiment.spec.faults)} faults)")
    return EXIT_USAGE if failed else EXIT_PASS
