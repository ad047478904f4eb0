"""`kfchaos validate EXPERIMENT...`: every problem in every file, as FILE:LINE: field.path: message.

The same validator `compile`, `render` and `run` use (kfchaos.spec, safety guards included): a file that
passes here passes there. Warnings (accepted but changed at run time) go to stderr and do not fail.

Each valid file is also planned: per stage, the requests the replay will send and the fewest with which each
check can PASS (kfchaos.verdict.samples, the verdict's own rule). A stage too small for a check is a warning
naming spec.traffic.stages: the run would end INCONCLUSIVE there however well the target holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kfchaos.baseline import BaselineError, load_baseline
from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.cli.jsonout import emit, problem_dict
from kfchaos.errors import KfchaosError, Problem, SpecError
from kfchaos.spec import Experiment, baseline_path
from kfchaos.validate import load_experiment, load_experiment_warnings, missing_files
from kfchaos.yamlsource import load_yaml, read_source


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="check experiment files; errors as FILE:LINE: field: message")
    parser.add_argument("experiments", nargs="+", metavar="EXPERIMENT")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    parser.add_argument(
        "--json", action="store_true", help="one JSON document on stdout: per file, problems and warnings"
    )
    parser.set_defaults(func=run)


def _sample_sizes(path: str, experiment: Experiment) -> tuple[list[Any], list[str], list[Problem]]:
    """(per-stage support, lines to print, warnings) for one valid experiment file."""
    # For start-up speed: loads scipy and the planner.
    from kfchaos.verdict.samples import describe, shortfall, stage_support

    where = ("spec", "traffic", "stages")
    document = load_yaml(read_source(path), path)
    try:
        support = stage_support(experiment, Path(path).parent)
    except (KfchaosError, OSError, ValueError) as exc:
        return [], [], [document.problem(where, f"warning: cannot plan the stages to count their requests: {exc}")]
    warnings = [document.problem(where, f"warning: {shortfall(s)}") for s in support if s.short]
    return support, [f"  {describe(s)}" for s in support], warnings


def _baseline_problem(path: str, experiment: Experiment) -> Problem | None:
    """The experiment's baseline file, when there is one, loads as a run and a re-judgment load it: its content
    hash, its figures, and its control's records beside it (records_sha256)."""
    found = baseline_path(Path(path), experiment)
    if found is None or not found.is_file():
        return None  # a warning of its own (kfchaos.validate.experiment_warnings)
    try:
        load_baseline(found)
    except BaselineError as exc:
        return load_yaml(read_source(path), path).problem(("spec", "baseline", "file"), str(exc))
    except SpecError as exc:
        return load_yaml(read_source(path), path).problem(("spec", "baseline", "file"), f"{found}: {exc}")
    return None


def _support_dict(support: Any) -> dict[str, Any]:
    return {
        "stage": support.stage,
        "planned": support.planned,
        "needs": [{"check": n.check, "limit": n.limit, "requests": n.requests} for n in support.needs],
        "min_samples": support.min_samples,
        "too_few_for": [n.check for n in support.short],
    }


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
            # On stderr also with --json: an input error (exit 3) always says what was wrong where a person reads.
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            continue
        refused = [*missing_files(path, experiment), *filter(None, [_baseline_problem(path, experiment)])]
        if refused:
            failed = True
            entry.update(valid=False, problems=[problem_dict(p) for p in refused])
            for problem in refused:
                print(problem, file=sys.stderr)
            continue
        support, lines, sample_warnings = _sample_sizes(path, experiment)
        warnings = [*load_experiment_warnings(path), *sample_warnings]
        meta = experiment.metadata
        entry.update(
            name=meta.name,
            version=meta.version,
            faults=len(experiment.spec.faults),
            warnings=[problem_dict(w) for w in warnings],
            stages=[_support_dict(s) for s in support],
        )
        if args.json:
            continue
        for warning in warnings:
            print(warning, file=sys.stderr)
        if not args.quiet:
            print(f"{path}: ok ({meta.name} {meta.version}, {len(experiment.spec.faults)} faults)")
            print("\n".join(lines))
    if args.json:
        emit({"valid": not failed, "files": files})
    return EXIT_USAGE if failed else EXIT_PASS
