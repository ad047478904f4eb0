"""`kfchaos compile [--check]`: compile every pipeline and component; --check fails when anything is stale.

A refused pipeline (changed without a version bump) is not written, and its lock entry stays as it was: the
lock keeps describing the compiled files that exist. Other pipelines are still compiled.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS
from kfchaos.cli.jsonout import emit, problem_dict
from kfchaos.errors import KfchaosError, SpecError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compile",
        help="compile every pipeline to pipelines/compiled/<name>/<version>.yaml and update the lock file",
        description="Compile the generic pipeline, one pipeline per experiments/*.yaml (and per experiment file "
        "given as PATH, which then stays in the lock), and every component. "
        "A compiled version never changes: different output for an existing version is refused, naming the "
        "version to bump, and nothing is written.",
    )
    parser.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH", help="experiment files to compile besides experiments/*.yaml"
    )
    parser.add_argument(
        "--allow-outside",
        action="store_true",
        help="compile an experiment, or embed a baseline, that lies outside the repository (refused otherwise: "
        "the compiled pipeline carries it)",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is stale")
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite existing compiled versions (only for versions never uploaded anywhere)",
    )
    parser.add_argument("--root", default=".", type=Path, help="repository root (default: current directory)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout instead of text")
    parser.set_defaults(func=run)


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, file=sys.stderr)


def _keep_refused_lock_entries(root: Path, result: Any, refused_names: set[str]) -> None:
    """The lock the plan would write, with each refused pipeline's entry as committed (or absent)."""
    from kfchaos.kfp.compile import LOCK_FILE
    from kfchaos.kfp.versioning import read_lock, render_lock

    lock = read_lock(root / LOCK_FILE)
    entries = [lock[e.name] if e.name in refused_names and e.name in lock else e for e in result.entries]
    entries = [e for e in entries if e.name not in refused_names or e.name in lock]
    text = render_lock(entries).encode()
    current = root / LOCK_FILE
    if current.is_file() and current.read_bytes() == text:
        result.writes.pop(LOCK_FILE, None)
    else:
        result.writes[LOCK_FILE] = text


def _check_inside(args: argparse.Namespace, root: Path, files: list[Path]) -> None:
    """An experiment or its baseline outside the repository is refused unless --allow-outside; allowed, it is
    named: the compiled pipeline embeds both as parameter defaults."""
    from kfchaos.kfp.compile import outside
    from kfchaos.spec import baseline_path
    from kfchaos.validate import load_experiment

    for path in files:
        try:
            found = baseline_path(path, load_experiment(path))
        except SpecError:
            found = None  # reported by the compile itself
        for what, file in (("experiment", path), ("baseline", found)):
            if file is None or (what == "baseline" and not file.is_file()) or not outside(root, file):
                continue
            if not args.allow_outside:
                raise KfchaosError(
                    f"{path}: the {what} {file.resolve()} lies outside the repository {root}, and the compiled "
                    "pipeline would carry it; move it into the repository or give --allow-outside"
                )
            _say(args, f"note: embedding the {what} {file.resolve()} from outside the repository (--allow-outside)")


def run(args: argparse.Namespace) -> int:
    from kfchaos.kfp.compile import apply, experiment_files, plan
    from kfchaos.validate import load_experiment_warnings

    root = args.root.resolve()
    for path in args.paths:
        if not path.is_file():
            raise KfchaosError(f"{path}: no such experiment file")
    files = experiment_files(root, args.paths)
    _check_inside(args, root, files)
    warnings = [w for path in files for w in load_experiment_warnings(path)]
    for warning in warnings:
        _say(args, str(warning))
    result = plan(root, args.paths)
    refused_names = {Path(problem.path).parent.name for problem in result.refusals}
    # A lock entry is stale for a refused pipeline only because its version was not bumped: say that once.
    stale = [p for p in result.stale if not any(p.message.startswith(f"entry for {name} ") for name in refused_names)]
    written: list[Path] = []
    if args.force and not args.check:
        for problem in result.refusals:
            _say(args, f"overwriting (--force) {problem.path}")
        result.refusals.clear()
    for problem in result.refusals:
        _say(args, f"kfchaos compile: refused: {problem}")
    if args.check:
        for problem in stale:
            _say(args, f"kfchaos compile --check: {problem}; run `kfchaos compile`")
        code = EXIT_FAIL if result.refusals or stale else EXIT_PASS
        if code == EXIT_PASS:
            _say(args, f"up to date: {len(result.entries)} pipelines")
    else:
        if result.refusals:
            _keep_refused_lock_entries(root, result, refused_names)
        written = apply(root, result)
        for path in written:
            _say(args, f"wrote {path}")
        for name in sorted(refused_names):
            _say(args, f"kfchaos compile: {name} not written; its lock entry is unchanged until its version is bumped")
        code = EXIT_FAIL if result.refusals else EXIT_PASS
    if args.json:
        emit(
            {
                "ok": code == EXIT_PASS,
                "check": bool(args.check),
                "refused": [{"path": p.path, "message": p.message} for p in result.refusals],
                "stale": [{"path": p.path, "message": p.message} for p in stale],
                "written": [str(p) for p in written],
                "pipelines": [{"name": e.name, "version": e.version, "ir_hash": e.ir_hash} for e in result.entries],
                "warnings": [problem_dict(w) for w in warnings],
            }
        )
    elif not args.check and code == EXIT_PASS:
        for entry in result.entries:
            print(f"{entry.name} {entry.version} {entry.ir_hash}")
    return code
