"""`kfchaos history EXPERIMENT`: the runs of one experiment side by side (a local runs/ folder, or a KFP experiment
or recurring run through the API), each verified before it counts; per check and stage the verdict strip, the
values against the limit, OOM kills and the pipeline version; a stated test for each version bump
(kfchaos.history.regression); the failure modes that recur. `--compare OLD NEW`: that one bump, as Markdown for a
pull request comment.

Exit codes: 0 no regression found, 1 a regression, 2 (`--compare` only) too few runs to compare anything,
3 usage or input error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS
from kfchaos.cli.cmd_run import ACCESS_KEY_ENV, ARTIFACT_STORE_ENV, PIPELINE_ROOT_ENV, SECRET_KEY_ENV
from kfchaos.errors import KfchaosError
from kfchaos.kfp.cliargs import add_connection_args, connection_from
from kfchaos.kfp.client import DEFAULT_EXPERIMENT
from kfchaos.kfp.objectstore import DEFAULT_PIPELINE_ROOT


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history", help="an experiment's runs across nights and pipeline versions; regressions by a stated test"
    )
    parser.add_argument(
        "experiment", metavar="EXPERIMENT_OR_NAME", help="an experiment file, or the experiment's metadata.name"
    )
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="the local runs folder (default: runs)")
    parser.add_argument("--json", action="store_true", help="one JSON document (kfchaos.History) on stdout")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write an offline HTML page here")
    parser.add_argument(
        "--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two pipeline versions; Markdown for a PR comment"
    )
    parser.add_argument(
        "--require-signed",
        action="store_true",
        help="count only runs signed by a key trusted here (a run folder's seal, a KFP run's audit record)",
    )
    parser.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="PEM_OR_FINGERPRINT",
        help="a key to trust besides the config folder's (as `kfchaos audit verify`)",
    )
    kfp = parser.add_argument_group("runs on KFP (instead of --runs)")
    kfp.add_argument(
        "--kfp-experiment",
        default=DEFAULT_EXPERIMENT,
        help=f"--host: the KFP experiment the runs are in (default: {DEFAULT_EXPERIMENT})",
    )
    kfp.add_argument("--recurring-run", help="--host: only the runs this recurring run started (its id)")
    kfp.add_argument("--limit", type=int, default=200, help="--host: the newest N runs (default: 200)")
    kfp.add_argument(
        "--artifact-store",
        default=os.environ.get(ARTIFACT_STORE_ENV, ""),
        help=f"--host: the S3 API of KFP's object store, for a KFP whose API cannot serve artifacts "
        f"(2.1.0); keys from env {ACCESS_KEY_ENV}/{SECRET_KEY_ENV}",
    )
    kfp.add_argument(
        "--pipeline-root",
        default=os.environ.get(PIPELINE_ROOT_ENV, DEFAULT_PIPELINE_ROOT),
        help=f"--artifact-store: the runs' pipeline root (default: {DEFAULT_PIPELINE_ROOT})",
    )
    add_connection_args(parser)
    parser.set_defaults(func=run)


def experiment_name(given: str) -> str:
    """The experiment's metadata.name: read from the file when `given` is one, else `given` itself."""
    if Path(given).is_file():
        from kfchaos.validate import load_experiment

        return load_experiment(Path(given)).metadata.name
    return given


def _found(args: argparse.Namespace, name: str) -> tuple[Any, str]:
    from kfchaos import signing
    from kfchaos.history import local

    trusted = signing.trust(args.public_key)
    if not args.host:
        versions = set(args.compare) if args.compare else None
        found = local.read_runs(args.runs, name, versions=versions, require_signed=args.require_signed, trusted=trusted)
        return found, str(args.runs)
    from kfchaos.history import kfpruns
    from kfchaos.kfp.client import connect

    client = connect(connection_from(args))
    found = kfpruns.read_runs(
        client,
        name,
        kfp_experiment=args.kfp_experiment,
        namespace=args.namespace,
        recurring_run=args.recurring_run,
        artifacts=_artifact_store(args, name),
        limit=args.limit,
        require_signed=args.require_signed,
        trusted=trusted,
    )
    where = f"KFP {args.host} experiment {args.kfp_experiment}"
    return found, where + (f" recurring run {args.recurring_run}" if args.recurring_run else "")


def _artifact_store(args: argparse.Namespace, pipeline_name: str) -> Any:
    if not args.artifact_store:
        return None
    from kfchaos.kfp.follow import ArtifactStore
    from kfchaos.kfp.objectstore import ObjectStore

    keys = os.environ.get(ACCESS_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, "")
    if not all(keys):
        raise KfchaosError(f"--artifact-store needs the store's keys in env {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
    # The compiled pipeline is named after the experiment (PipelineDefaults.name in kfchaos.kfp.pipelines).
    return ArtifactStore(ObjectStore(args.artifact_store, *keys), args.pipeline_root, pipeline_name)


def run(args: argparse.Namespace) -> int:
    from kfchaos.cli.jsonout import emit
    from kfchaos.history import render, summary

    if args.limit < 1:
        raise KfchaosError("--limit: must be at least 1")
    name = experiment_name(args.experiment)
    found, where = _found(args, name)
    pairs = [tuple(args.compare)] if args.compare else None
    history = summary.build(name, where, found.runs, found.unreadable, pairs)
    if args.html:
        from kfchaos import safefile

        safefile.write_text(args.html, render.html(history))
        print(f"history page: {args.html}", file=sys.stderr)
    if args.json:
        emit(history.to_dict())
    elif args.compare:
        sys.stdout.write(render.markdown_compare(history))
    else:
        sys.stdout.write(render.text(history))
    if any(c.regressions for c in history.comparisons):
        return EXIT_FAIL
    if args.compare and not history.comparisons[0].tested:
        return EXIT_INCONCLUSIVE
    return EXIT_PASS
