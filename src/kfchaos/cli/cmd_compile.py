"""`kfchaos compile [--check]`: compile every pipeline and component; --check fails when anything is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile every pipeline to pipelines/compiled/<name>/<version>.yaml and update the lock file",
        description="Compile the generic pipeline, one pipeline per experiments/*.yaml, and every component. "
        "A compiled version never changes: different output for an existing version is refused, naming the "
        "version to bump.",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is stale")
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite existing compiled versions (only for versions never uploaded anywhere)",
    )
    parser.add_argument("--root", default=".", type=Path, help="repository root (default: current directory)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.kfp.compile import apply, plan

    root = args.root.resolve()
    result = plan(root)
    for problem in result.refusals:
        if args.force and not args.check:
            print(f"overwriting (--force) {problem.path}", file=sys.stderr)
        else:
            print(f"kfchaos compile: {problem}", file=sys.stderr)
    if args.check:
        for problem in result.stale:
            print(f"kfchaos compile --check: {problem}; run `kfchaos compile`", file=sys.stderr)
        if result.refusals or result.stale:
            return EXIT_FAIL
        print(f"up to date: {len(result.entries)} pipelines")
        return EXIT_PASS
    if args.force:
        result.refusals.clear()
    for path in apply(root, result):
        print(f"wrote {path}")
    for entry in result.entries:
        print(f"{entry.name} {entry.version} {entry.ir_hash}")
    return EXIT_FAIL if result.refusals else EXIT_PASS
