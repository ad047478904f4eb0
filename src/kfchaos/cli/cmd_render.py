"""`kfchaos render EXPERIMENT`: the manifests a run would apply, as multi-document YAML on stdout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.errors import SpecError
from kfchaos.faults.render import render_experiment
from kfchaos.faults.safety import FaultInputError, FaultSafetyError
from kfchaos.spec import load_experiment
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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        experiment = load_experiment(args.experiment)
        manifests = render_experiment(experiment, args.run_id, args.pipeline_version)
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return EXIT_USAGE
    except (FaultSafetyError, FaultInputError) as exc:
        # Point at the line of the field that caused the refusal, like `kfchaos validate` does.
        document = load_yaml(read_source(args.experiment), args.experiment)
        print(document.problem(exc.path, str(exc)), file=sys.stderr)
        return EXIT_USAGE
    if args.check:
        from kfchaos.faults.crdschema import validate_chaos_object

        schema_problems = [
            f"{args.experiment}: {manifest.get('kind')}/{(manifest.get('metadata') or {}).get('name')}: {problem}"
            for manifest in manifests
            for problem in validate_chaos_object(manifest)
        ]
        for line in schema_problems:
            print(line, file=sys.stderr)
        if schema_problems:
            return EXIT_USAGE
    if manifests:
        yaml.safe_dump_all(manifests, sys.stdout, sort_keys=False, explicit_start=True)
    else:
        print(f"# {args.experiment}: no cluster-side faults (nothing to apply)")
    return EXIT_PASS
