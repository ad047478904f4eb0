"""`kfchaos validate EXPERIMENT...`: every problem in every file, as FILE:LINE: field.path: message.

The same validator `compile`, `render` and `run` use (kfchaos.spec, safety guards included): a file that
passes here passes there. Warnings (accepted but changed at run time) go to stderr and do not fail.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.cli.jsonout import emit, problem_dict
from kfchaos.errors import SpecError
from kfchaos.spec import load_experiment, load_experiment_warnings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="check experiment files; errors as FILE:LINE: field: message")
    parser.add_argument("experiments", nargs="+", metavar="EXPERIMENT")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    parser.add_argument(
        "--json", action="store_true", help="one JSON document on stdout: per file, problems and warnings"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    failed = False
    files: list[dict[str, Any]] = []
    for path in args.experiments:
        entry: dict[str, Any] = {"file": path, "valid": True, "problems": [], "warnings": []}
        files.append(entry)
        try:
            experiment = load_experiment(path)
        except SpecError as exc:
            failed = True
            entry.update(valid=False, problems=[problem_dict(p) for p in exc.problems])
            if not args.json:
                for problem in exc.problems:
                    print(problem, file=sys.stderr)
            continue
        warnings = load_experiment_warnings(path)
        meta = experiment.metadata
        entry.update(
            name=meta.name,
            version=meta.version,
            faults=len(experiment.spec.faults),
            warnings=[problem_dict(w) for w in warnings],
        )
        if args.json:
            continue
        for warning in warnings:
            print(warning, file=sys.stderr)
        if not args.quiet:
            print(f"{path}: ok ({meta.name} {meta.version}, {len(experiment.spec.faults)} faults)")
    if args.json:
        emit({"valid": not failed, "files": files})
    return EXIT_USAGE if failed else EXIT_PASS
