"""`kfchaos render EXPERIMENT`: the manifests a run would apply, as multi-document YAML on stdout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.cli.jsonout import emit, problem_dict
from kfchaos.errors import SpecError
from kfchaos.faults.render import render_experiment
from kfchaos.faults.safety import FaultInputError, FaultSafetyError
from kfchaos.validate import load_experiment, load_experiment_warnings
from kfchaos.yamlsource import load_yaml, read_source


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("render", help="print the Chaos Mesh manifests an experiment would apply")
    parser.add_argument("experiment", metavar="EXPERIMENT")
    parser.add_argument("--run-id", default="dry-run", help="run id to label the objects with (default: dry-run)")
    parser.add_argument("--pipeline-version", default=None, help="default: the experiment's metadata.version")
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate each manifest against the vendored Chaos Mesh CRD schemas (strict, offline); exit 3 if not",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON document on stdout: manifests, problems, warnings"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problems: list[str] = []
    structured: list[dict[str, object]] = []
    manifests: list[dict[str, object]] = []
    try:
        experiment = load_experiment(args.experiment)
        manifests = render_experiment(experiment, args.run_id, args.pipeline_version)
    except SpecError as exc:
        problems = [str(p) for p in exc.problems]
        structured = [problem_dict(p) for p in exc.problems]
    except (FaultSafetyError, FaultInputError) as exc:
        # Point at the line of the field that caused the refusal, like `kfchaos validate` does.
        document = load_yaml(read_source(args.experiment), args.experiment)
        problem = document.problem(exc.path, str(exc))
        problems, structured = [str(problem)], [problem_dict(problem)]
    if not problems and args.check:
        from kfchaos.faultspec.crdschema import validate_chaos_object

        for manifest in manifests:
            metadata = manifest.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            for finding in validate_chaos_object(manifest):
                line = f"{args.experiment}: {manifest.get('kind')}/{name}: {finding}"
                problems.append(line)
                structured.append(
                    {"file": args.experiment, "object": f"{manifest.get('kind')}/{name}", "message": finding}
                )
    warnings = [] if problems else load_experiment_warnings(args.experiment)
    described = [] if problems else _traffic_side(experiment)
    if args.json:
        emit(
            {
                "valid": not problems,
                "manifests": [] if problems else manifests,
                "problems": structured,
                "warnings": [problem_dict(w) for w in warnings],
                "traffic_side": described,
            }
        )
        return EXIT_USAGE if problems else EXIT_PASS
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return EXIT_USAGE
    for warning in warnings:
        print(warning, file=sys.stderr)
    if manifests:
        yaml.safe_dump_all(manifests, sys.stdout, sort_keys=False, explicit_start=True)
    else:
        print(f"# {args.experiment}: no cluster-side faults (nothing to apply)")
    for line in described:  # YAML comments: the output stays a valid multi-document YAML stream
        print(f"# {line}")
    return EXIT_PASS


def _traffic_side(experiment: Any) -> list[str]:
    """Faults the replay performs itself, in words (only lora-adapter-churn describes itself so far)."""
    from kfchaos.faults.lorachurn import churn_faults, describe

    return [line for fault in churn_faults(experiment) for line in describe(experiment, fault)]
