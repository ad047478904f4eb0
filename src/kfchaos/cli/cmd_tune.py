"""`kfchaos tune EXPERIMENT --grid FILE --local [--json]`: the experiment run once per serving configuration of the
grid, one after another on the demo server, and the cheapest configuration that PASSes the whole ramp under the
faults recommended with its evidence (docs/tune.md). `--html FILE` also writes the sweep's page (the frontier chart,
the table and the evidence, offline). `--output FILE` compiles the sweep as one KFP pipeline instead.
`kfchaos tune --from-json RESULT [--html FILE]` shows a finished sweep again from its `--json` document, running
nothing.

Exit codes: 0 a configuration is recommended, 1 none PASSes the whole ramp (the closest is named), 3 the grid or
experiment was refused before anything ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfchaos.cli import EXIT_FAIL, EXIT_PASS
from kfchaos.cli.flags import add_demo_run_flags
from kfchaos.cli.jsonout import emit
from kfchaos.errors import Problem, SpecError

if TYPE_CHECKING:
    from kfchaos.tune.resultfile import Result
    from kfchaos.tune.sweep import Sweep


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="run the experiment once per serving configuration of a grid and recommend the cheapest that PASSes",
    )
    parser.add_argument("experiment", type=Path, nargs="?", metavar="EXPERIMENT")
    parser.add_argument("--grid", type=Path, metavar="FILE", help="the TuneGrid file (docs/tune.md)")
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
    mode.add_argument(
        "--from-json",
        type=Path,
        metavar="RESULT",
        help="show a finished sweep from its `--json` document (the table; the page with --html), running nothing",
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the sweep's page: the frontier chart (goodput against P99 under the faults), the table and "
        "the recommendation's evidence; one offline file (docs/tune.md)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout (kfchaos.TuneResult)")
    add_demo_run_flags(parser, "each configuration's control baseline")
    parser.set_defaults(func=run, tune_parser=parser)


def write_page(result: Result, path: Path) -> None:
    from kfchaos import safefile
    from kfchaos.tune.page import html

    safefile.write_text(path, html(result))
    print(f"tune page: {path}", file=sys.stderr)


def show(result: Any, as_json: bool, page: Path | None = None, result_json: Path | None = None) -> int:
    """Print a kfchaos.demo.runner.localtune.TuneResult: the table, or the JSON document; write its page to `page` and
    its JSON document to `result_json` where given; the exit code of its recommendation."""
    from kfchaos import safefile
    from kfchaos.tune.resultfile import parse_result
    from kfchaos.tune.table import document, table

    sweep = result.sweep
    doc = document(
        str(sweep.experiment_path), str(sweep.grid_path), result.outcomes, result.recommendation,
        sweep.experiment.spec.slo.p99_max,
    )  # fmt: skip
    if as_json:
        emit(doc)
    else:
        print(
            f"\nkfchaos tune: {sweep.experiment.metadata.name} x {len(result.outcomes)} configurations "
            f"(grid {sweep.loaded.grid.metadata.name}), ramp up to {sweep.top_stage} %\n"
        )
        print(table(result.outcomes, result.recommendation))
    if result_json is not None:
        safefile.write_text(result_json, json.dumps(doc, indent=1) + "\n")
        print(f"tune result: {result_json}", file=sys.stderr)
    if page is not None:  # drawn from the document, as --from-json draws it: one path for the page
        write_page(parse_result(doc, "this sweep"), page)
    print(f"tune finished in {result.seconds:.0f}s", file=sys.stderr)
    return EXIT_PASS if result.recommendation.chosen is not None else EXIT_FAIL


def from_json(args: argparse.Namespace) -> int:
    """A finished sweep shown again from its JSON document: the table (or the document), and the page."""
    from kfchaos.tune.resultfile import load_result
    from kfchaos.tune.table import document, table

    result = load_result(args.from_json)
    if args.json:
        emit(document(result.experiment, result.grid, result.outcomes, result.recommendation, result.p99_max))
    else:
        print(f"kfchaos tune: {result.experiment} x {len(result.outcomes)} configurations (grid {result.grid})\n")
        print(table(result.outcomes, result.recommendation))
    if result.disagreement:
        print(f"warning: {result.disagreement}", file=sys.stderr)
    if args.html is not None:
        write_page(result, args.html)
    return EXIT_PASS if result.recommendation.chosen is not None else EXIT_FAIL


def _usage(args: argparse.Namespace) -> None:
    """What argparse cannot say: which arguments go with which mode."""
    if args.from_json is not None:
        extra = [name for name, given in (("EXPERIMENT", args.experiment), ("--grid", args.grid)) if given]
        if extra:
            args.tune_parser.error(f"--from-json shows a finished sweep: {' and '.join(extra)} not allowed with it")
        return
    if args.experiment is None or args.grid is None:
        args.tune_parser.error("the following arguments are required: EXPERIMENT and --grid (or --from-json RESULT)")
    if args.output is not None and args.html is not None:
        args.tune_parser.error("--html draws a finished sweep (--local or --from-json), not a compiled one (--output)")


def outside_problems(sweep: Sweep, root: Path) -> list[Problem]:
    """The files the compiled sweep would carry (the experiment, and its baseline as a parameter default) that lie
    outside the repository: refused, as `kfchaos compile` refuses them (kfchaos.kfp.compile.outside, one rule), since
    an experiment naming `baseline: {file: ~/.ssh/id_ed25519}` would have that file embedded and uploaded to KFP.
    The experiment is named by its file, the baseline by the line of spec.baseline.file."""
    from kfchaos.kfp.compile import outside
    from kfchaos.spec import baseline_path
    from kfchaos.yamlsource import load_yaml, read_source

    where = f"lies outside the repository {root}, and the compiled sweep would carry it; move it into the repository"
    if outside(root, sweep.experiment_path):
        return [Problem(str(sweep.experiment_path), 1, (), f"the experiment {sweep.experiment_path.resolve()} {where}")]
    baseline = baseline_path(sweep.experiment_path, sweep.experiment)
    if baseline is None or not baseline.is_file() or not outside(root, baseline):  # none there: nothing embedded
        return []
    document = load_yaml(read_source(sweep.experiment_path), str(sweep.experiment_path))
    return [document.problem(("spec", "baseline", "file"), f"the baseline {baseline.resolve()} {where}")]


def compile_only(args: argparse.Namespace) -> int:
    from kfchaos import safefile
    from kfchaos.kfp.tunecompile import compile_sweep, sweep_name
    from kfchaos.tune.sweep import load_sweep

    sweep = load_sweep(args.experiment, args.grid)
    refused = outside_problems(sweep, args.root.resolve())
    if refused:
        raise SpecError(refused)
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
    _usage(args)
    if args.from_json is not None:
        return from_json(args)
    if args.output is not None:
        return compile_only(args)
    from kfchaos.demo.runner.localtune import tune_locally

    # With --json, stdout carries the one document: the runs' progress lines go to stderr.
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        result = tune_locally(args.experiment, args.grid, args.root.resolve(), args.runs, args.baseline_seconds)
    return show(result, args.json, args.html)
