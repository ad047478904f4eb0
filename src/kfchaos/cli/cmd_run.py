"""`kfchaos run EXPERIMENT --host URL [--wait] | --local`: submit the experiment's pipeline version (and follow it
to its verdict), or run it here."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from kfchaos.cli import EXIT_PASS
from kfchaos.cli.flags import require_url
from kfchaos.errors import KfchaosError, SpecError
from kfchaos.kfp.client import RUN_SERVICE_ACCOUNT
from kfchaos.kfp.objectstore import DEFAULT_PIPELINE_ROOT

ARTIFACT_STORE_ENV = "KFCHAOS_ARTIFACT_STORE"
PIPELINE_ROOT_ENV = "KFCHAOS_PIPELINE_ROOT"
# The object store's keys come from the environment only, never a flag: a flag shows in `ps` and shell history.
ACCESS_KEY_ENV = "KFCHAOS_ARTIFACT_ACCESS_KEY"
SECRET_KEY_ENV = "KFCHAOS_ARTIFACT_SECRET_KEY"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run an experiment: submit its uploaded pipeline version (--host) or run it with kfp.local (--local)",
    )
    parser.add_argument("experiment", type=Path, metavar="EXPERIMENT")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", action="store_true", help="run the pipeline on this machine (kfp.local)")
    mode.add_argument("--host", help="KFP API URL to submit to")
    parser.add_argument("--target", default="", help="override spec.target.endpoint (e.g. a local demo server)")
    parser.add_argument("--run-name", help="default: <experiment>-<version>")
    parser.add_argument("--kfp-experiment", default="kfchaos", help="KFP experiment (run folder) for --host")
    parser.add_argument("--experiment-dir", help="where traffic paths resolve in the run (--host default: the image's)")
    parser.add_argument(
        "--service-account",
        default=RUN_SERVICE_ACCOUNT,
        help="service account the whole run executes as, KFP's drivers and launchers included (--host only; "
        f"default {RUN_SERVICE_ACCOUNT}: manifests/base grants it KFP's runner Role and the chaos Role)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="--host: follow the run, print each task as it finishes, exit 0/1/2 on its verdict like `kfchaos verdict`",
    )
    parser.add_argument(
        "--attach",
        metavar="RUN_ID",
        help="--host: follow this existing run of the experiment's pipeline (e.g. one a schedule started) to its "
        "verdict instead of submitting one; implies --wait",
    )
    parser.add_argument("--wait-timeout", default="12h", help="--wait: give up (INCONCLUSIVE) after this long")
    parser.add_argument("--poll", default="10s", help="--wait: how often to ask KFP")
    parser.add_argument(
        "--artifact-store",
        metavar="URL",
        default=os.environ.get(ARTIFACT_STORE_ENV, ""),
        help="--wait: the S3 API of KFP's object store (e.g. a port-forward of minio-service.kubeflow:9000), read "
        "when the KFP API cannot serve the verdict artifact (KFP 2.1.0); keys from env "
        f"{ACCESS_KEY_ENV}/{SECRET_KEY_ENV} (default: env {ARTIFACT_STORE_ENV})",
    )
    parser.add_argument(
        "--pipeline-root",
        default=os.environ.get(PIPELINE_ROOT_ENV, DEFAULT_PIPELINE_ROOT),
        help=f"--artifact-store: the runs' pipeline root (default: env {PIPELINE_ROOT_ENV}, "
        f"else {DEFAULT_PIPELINE_ROOT})",
    )
    parser.add_argument("--root", default=".", type=Path, help="repository root, for baselines (default: .)")
    parser.add_argument("--output", default="runs/local", type=Path, help="pipeline root for --local")
    parser.add_argument("--runs", type=Path, help="--local: where the run folder <run-id>/ goes (default: ROOT/runs)")
    # --host sits in the mode group above, so the shared connection options are spelled out here.
    group = parser.add_argument_group("KFP authentication")
    group.add_argument("--token", help="bearer token (default: env KFCHAOS_KFP_TOKEN); never stored")
    group.add_argument("--kube-context", help="use this kube context's credentials")
    group.add_argument("--namespace", default="kubeflow", help="KFP namespace (multi-user: your profile)")
    parser.set_defaults(func=run)


def _run_folder(outcome: Any, runs_root: Path) -> None:
    """The run folder (kfchaos.rundir layout) from the kfp.local outputs, when the run got to its verdict."""
    from kfchaos.rundir import kfpimport, layout

    if outcome.audit is None:
        return
    folder = kfpimport.from_local_pipeline(
        outcome.run_dir, runs_root.resolve(), source="run --local", run_id=outcome.run_id
    )
    print(f"run folder: {folder.path}")
    print(f"report: {folder.file(layout.REPORT_HTML)}")


def _artifact_store(args: argparse.Namespace) -> Any:
    """The object store to read the verdict from when the KFP API cannot, or None when none was given."""
    if not args.artifact_store:
        return None
    from kfchaos.kfp.follow import ArtifactStore
    from kfchaos.kfp.objectstore import ObjectStore
    from kfchaos.validate import load_experiment

    keys = os.environ.get(ACCESS_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, "")
    if not all(keys):
        raise KfchaosError(f"--artifact-store needs the store's keys in env {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
    # The compiled pipeline is named after the experiment (PipelineDefaults.name in kfchaos.kfp.pipelines).
    name = load_experiment(args.experiment).metadata.name
    return ArtifactStore(ObjectStore(args.artifact_store, *keys), args.pipeline_root, name)


def run(args: argparse.Namespace) -> int:
    from kfchaos.kfp import runs

    require_url("--target", args.target)
    if args.local:
        from kfchaos.demo.runner.preflight import check_local_run
        from kfchaos.validate import load_experiment, missing_files

        experiment = load_experiment(args.experiment)
        missing = missing_files(args.experiment, experiment)  # read here, by this process's tasks
        if missing:
            raise SpecError(missing)
        check_local_run(experiment, args.target)  # one line, exit 3, before any task
        import os

        from kfchaos.demo.runner import localrun

        if not os.environ.get(localrun.CHILD_ENV):  # progress and a verdict table; kfp.local's dumps to a log
            return localrun.main(
                args.experiment,
                root=args.root.resolve(),
                target=args.target,
                pipeline_root=args.output.resolve(),
                runs_root=(args.runs or args.root / "runs").resolve(),
            )
        outcome = runs.run_local(
            args.experiment, root=args.root.resolve(), target=args.target, pipeline_root=args.output.resolve()
        )
        print(outcome.summary())
        _run_folder(outcome, args.runs or args.root / "runs")
        return outcome.exit_code
    from kfchaos.kfp import client as kfp_client
    from kfchaos.kfp.cliargs import connection_from

    if args.token and not args.host:
        raise KfchaosError("--token needs --host")
    if (args.wait or args.attach) and not args.host:
        raise KfchaosError("--wait and --attach need --host")
    args.wait = args.wait or bool(args.attach)
    artifacts = _artifact_store(args) if args.wait else None  # its problems before anything is submitted
    client = kfp_client.connect(connection_from(args))
    if args.attach:
        run_id = args.attach
        print(f"following run {run_id}", flush=True)
    else:
        run_id = runs.submit_experiment(
            client,
            args.experiment,
            root=args.root.resolve(),
            target=args.target,
            experiment_dir=args.experiment_dir,
            run_name=args.run_name,
            kfp_experiment=args.kfp_experiment,
            service_account=args.service_account,
        )
        print(f"submitted run {run_id}", flush=True)
    if not args.wait:
        return EXIT_PASS
    from kfchaos.kfp.follow import follow
    from kfchaos.units import parse_duration

    try:
        timeout, poll = parse_duration(args.wait_timeout), parse_duration(args.poll)
    except ValueError as exc:
        raise KfchaosError(f"--wait-timeout/--poll: {exc}") from None
    followed = follow(
        client,
        run_id,
        poll=poll,
        timeout=timeout,
        out=lambda line: print(line, flush=True),
        artifacts=artifacts,
    )
    print(followed.summary())
    return followed.exit_code
