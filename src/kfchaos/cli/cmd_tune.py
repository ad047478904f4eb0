"""`kfchaos tune EXPERIMENT --grid FILE --local [--json]`: the experiment run once per serving configuration of the
grid, one after another on the demo server, and the cheapest configuration that PASSes the whole ramp under the
faults recommended with its evidence (docs/tune.md). `--output FILE` compiles the sweep as one KFP pipeline instead.

Exit codes: 0 a configuration is recommended, 1 none PASSes the whole ramp (the closest is named), 3 the grid or
experiment was refused before anything ran.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS
from kfchaos.cli.jsonout import emit


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="run the experiment once per serving configuration of a grid and recommend the cheapest that PASSes",
    )
    parser.add_argument("experiment", type=Path, metavar="EXPERIMENT")
    parser.add_argument("--grid", type=Path, required=True, metavar="FILE", help="the TuneGrid file (docs/tune.md)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--local", action="store_true", help="run each configuration on the demo server here, one after another"
    )
    mode.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="compile the sweep as one KFP pipeline (a ParallelFor over the configurations) into FILE; each "
        "configuration needs its cluster `target` (docs/tune.md)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout (kfchaos.TuneResult)")
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where run folders go (default: runs/)")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="the repository whose commit the audit records (default: .)"
    )
    parser.add_argument(
        "--baseline-seconds",
        type=float,
        default=15.0,
        help="least fault-free replay per stage rate for each configuration's control baseline",
    )
    parser.set_defaults(func=run)


def show(result: Any, as_json: bool) -> int:
    """Print a kfchaos.demo.tune.TuneResult: the table, or the JSON document; the exit code of its recommendation."""
    from kfchaos.tune.table import document, table

    sweep = result.sweep
    if as_json:
        emit(document(str(sweep.experiment_path), str(sweep.grid_path), result.outcomes, result.recommendation))
    else:
        print(
            f"\nkfchaos tune: {sweep.experiment.metadata.name} x {len(result.outcomes)} configurations "
            f"(grid {sweep.loaded.grid.metadata.name}), ramp up to {sweep.top_stage} %\n"
        )
        print(table(result.outcomes, result.recommendation))
    print(f"tune finished in {result.seconds:.0f}s", file=sys.stderr)
    return EXIT_PASS if result.recommendation.chosen is not None else EXIT_FAIL


def compile_only(args: argparse.Namespace) -> int:
    from kfchaos import safefile
    from kfchaos.kfp.tunecompile import compile_sweep, sweep_name
    from kfchaos.tune.sweep import load_sweep

    sweep = load_sweep(args.experiment, args.grid)
    data, ir_hash = compile_sweep(sweep, args.root.resolve())
    safefile.write_bytes(args.output, data)
    configurations = [c.name for c in sweep.loaded.grid.configurations]
    if args.json:
        emit({"pipeline": sweep_name(sweep), "version": sweep.experiment.metadata.version, "file": str(args.output),
              "ir_hash": ir_hash, "configurations": configurations})  # fmt: skip
    else:
        loop = f"ParallelFor over {len(configurations)} configurations: {', '.join(configurations)}"
        print(f"compiled {sweep_name(sweep)} {sweep.experiment.metadata.version} -> {args.output} ({loop}; {ir_hash})")
    return EXIT_PASS


def run(args: argparse.Namespace) -> int:
    if args.output is not None:
        return compile_only(args)
    from kfchaos.demo.tune import tune_locally

    # With --json, stdout carries the one document: the runs' progress lines go to stderr.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        result = tune_locally(args.experiment, args.grid, args.root.resolve(), args.runs, args.baseline_seconds)
    return show(result, args.json)
