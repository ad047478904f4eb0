"""`kfchaos verdict`: the SLO verdict from per-request records, a baseline and (optionally) metric series.

Exit code by verdict: 0 PASS, 1 FAIL, 2 INCONCLUSIVE; 3 when an input is bad (named with file and field), when the
inputs do not belong together (another experiment's baseline, two runs' records), or when a --run folder's seal
does not verify (kfchaos.runseal).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kfchaos import runseal
from kfchaos.cli import EXIT_FAIL, EXIT_INCONCLUSIVE, EXIT_PASS
from kfchaos.errors import KfchaosError
from kfchaos.jsonsource import load_json
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.records import unfinished_stages
from kfchaos.rundir import layout, verification, writing
from kfchaos.rundir.layout import RunDir
from kfchaos.spec import Experiment
from kfchaos.validate import load_experiment
from kfchaos.verdict import Status, Verdict
from kfchaos.verdict.files import find_baseline, judge
from kfchaos.yamlsource import read_source

EXIT_BY_STATUS = {Status.PASS: EXIT_PASS, Status.FAIL: EXIT_FAIL, Status.INCONCLUSIVE: EXIT_INCONCLUSIVE}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verdict", help="SLO verdict from replay records: exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE, 3 bad input"
    )
    parser.add_argument("--experiment", metavar="FILE", help="the experiment YAML")
    parser.add_argument("--records", metavar="R.parquet", help="per-request records (Parquet)")
    parser.add_argument(
        "--run", metavar="DIR", help="re-judge a run folder (runs/<run-id>/): its experiment, records, baseline, ..."
    )
    parser.add_argument(
        "--unsealed",
        action="store_true",
        help="with --run: judge a folder whose seal does not verify (else exit 3), with a warning",
    )
    parser.add_argument(
        "--baseline", metavar="B.yaml", help="baseline file (default: the experiment's spec.baseline.file)"
    )
    parser.add_argument("--metrics", metavar="M.json", help="metric series collected during the run")
    parser.add_argument(
        "--run-state",
        metavar="S.json",
        help="run facts from the pipeline: faults verified, stage validity, fault removal time",
    )
    parser.add_argument(
        "--faults-verified", action="store_true", help="assert every fault was verified injected (manual runs)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON (the contract)")
    parser.add_argument(
        "--out", metavar="DIR", help="write a run folder here (verdict.json, report.html, report.md and the inputs)"
    )
    parser.set_defaults(func=run, verdict_parser=parser)


def _from_run_folder(args: argparse.Namespace) -> None:
    """--run DIR: the folder's own files stand in for the input flags (explicit flags still win)."""
    run = layout.open_run(args.run)
    _refuse_unsealed(run, args)
    verification.check_control_records(run)
    args.experiment = args.experiment or str(run.file(layout.EXPERIMENT))
    args.records = args.records or str(run.file(layout.RECORDS))
    for attr, name in (("baseline", layout.BASELINE), ("metrics", layout.METRICS), ("run_state", layout.RUN_STATE)):
        if getattr(args, attr) is None and run.has(name):
            setattr(args, attr, str(run.file(name)))


def _refuse_unsealed(run: RunDir, args: argparse.Namespace) -> None:
    """A run folder is judged only when its seal verifies (kfchaos.runseal): a file edited, added or removed after
    the run is refused, exit 3 (bad input), naming each; `--unsealed` judges it anyway, with a warning."""
    broken = [f for f in runseal.check(run.path, layout.SEALED) if not f.ok]
    if not broken:
        return
    listed = "; ".join(f"{f.what}: {f.detail}" for f in broken)
    if not getattr(args, "unsealed", False):
        raise KfchaosError(
            f"{run.path}: the run folder does not verify ({listed}); `kfchaos audit verify {run.path}` says more, "
            "--unsealed judges it anyway"
        )
    args.seal_warnings = [f"run folder does not verify, judged anyway (--unsealed): {listed}"]


def build(args: argparse.Namespace) -> tuple[Verdict, Experiment, MetricsSnapshot | None]:
    if getattr(args, "run", None):
        _from_run_folder(args)
    if not args.experiment or not args.records:
        message = "the following arguments are required: --experiment and --records, or --run DIR (a run folder)"
        parser = getattr(args, "verdict_parser", None)
        if parser is not None:
            parser.error(message)  # a usage error, as argparse's own `required` gives (exit 3)
        raise KfchaosError(f"kfchaos verdict: {message}")
    return judge(args)


def _print_summary(verdict: Verdict) -> None:
    print(f"{verdict.experiment} {verdict.version}: {verdict.status.value}")
    for stage in verdict.stages:
        print(f"  stage {stage.stage:>3}%  {stage.status.value:<12} {stage.requests} requests")
        for check in stage.checks:
            if check.status is not Status.PASS:
                print(f"      {check.status.value:<12} {check.name}: {check.reason}")
    for check in verdict.checks:
        print(f"  {check.status.value:<12} {check.name}: {check.reason}")
    for warning in verdict.warnings:
        print(f"  warning: {warning}", file=sys.stderr)


def _write_run_folder(args: argparse.Namespace, verdict: Verdict, metrics: MetricsSnapshot | None) -> None:
    """--out DIR: the run folder layout (kfchaos.rundir), with the inputs this verdict was judged on."""
    baseline_path = args.baseline
    spec_file = load_experiment(Path(args.experiment)).spec.baseline.file
    if baseline_path is None and verdict.baseline is not None and spec_file is not None:
        baseline_path = find_baseline(Path(args.experiment), spec_file)
    # Capped before reading (kfchaos.jsonsource, kfchaos.yamlsource): a 3 GB run.json is refused, not read whole.
    run_state = load_json(args.run_state, "run state") if args.run_state else {}
    if args.faults_verified:
        run_state["faults_verified"] = True  # so that re-judging the folder asserts what this command did
    unfinished = unfinished_stages(args.records)  # a stage its disk cut: the folder's one records file cannot say
    if unfinished:
        given = run_state.get("stage_valid")
        run_state["stage_valid"] = {
            **(given if isinstance(given, dict) else {}),
            **{str(k): v for k, v in unfinished.items()},
        }
    try:
        folder = writing.write(
            args.out,
            experiment_text=read_source(args.experiment).decode("utf-8", "replace"),
            records=args.records,
            verdict=verdict.to_dict(),
            baseline_text=read_source(baseline_path).decode("utf-8", "replace") if baseline_path else None,
            baseline_path=Path(baseline_path) if baseline_path else None,
            metrics=metrics,
            run_state=run_state or None,
            info={"source": "verdict"},
        )
    except OSError as exc:
        raise KfchaosError(f"{args.out}: cannot write the run folder: {exc.strerror or exc}") from None
    replaced = folder.manifest().get("replaced")
    if replaced:  # an earlier write's files this one does not make: gone, never sealed as this verdict's
        print(f"kfchaos: {folder.path} held an earlier write; removed its {', '.join(replaced)}", file=sys.stderr)
    print(f"run folder: {folder.path} (report: {folder.file(layout.REPORT_HTML)})", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    verdict, _experiment, metrics = build(args)
    if args.out:
        _write_run_folder(args, verdict, metrics)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        _print_summary(verdict)
    return EXIT_BY_STATUS[verdict.status]
