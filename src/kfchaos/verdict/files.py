"""The verdict on a set of files: experiment, records, baseline, metrics and run state, as `kfchaos verdict`
gives it (kfchaos.cli.cmd_verdict) and as a run folder is re-judged (kfchaos.rundir). Moved whole from the CLI
command so the run-folder library does not depend on a command; the inputs are still an argparse.Namespace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kfchaos.baseline import Baseline, load_baseline, scope_problems, scope_warning
from kfchaos.errors import KfchaosError
from kfchaos.faults.activity import stage_activities
from kfchaos.metrics.snapshot import MetricsSnapshot
from kfchaos.records import unfinished_stages
from kfchaos.spec import Experiment, experiment_relative
from kfchaos.validate import load_experiment
from kfchaos.verdict.evaluate import evaluate
from kfchaos.verdict.model import Verdict
from kfchaos.verdict.runstate import RunState, load_run_state


def _baseline(
    args: argparse.Namespace, experiment_file: Path, experiment: Experiment
) -> tuple[Baseline | None, list[str]]:
    spec_file = experiment.spec.baseline.file
    if args.baseline:
        path = Path(args.baseline)
    elif spec_file is None:
        return None, ["experiment names no baseline file; P99 drift is INCONCLUSIVE"]
    elif (found := find_baseline(experiment_file, spec_file)) is not None:
        path = found
    else:
        return None, [f"baseline file {spec_file} not found; P99 drift is INCONCLUSIVE"]
    baseline, warnings = load_baseline(path)
    problems = scope_problems(baseline, experiment)
    if problems:
        # Another experiment's or another target's production (or control) figures would judge this one's drift:
        # refused (exit 3).
        raise KfchaosError(
            f"{path}: not the baseline of {experiment_file}'s target: " + "; ".join(problems)
            + "; give this experiment's baseline (kfchaos baseline capture --experiment)"
        )  # fmt: skip
    unchecked = scope_warning(baseline)
    return baseline, [*warnings, *([unchecked] if unchecked else [])]


def find_baseline(experiment_file: Path, spec_file: str) -> Path | None:
    # The one rule for paths in an experiment: relative to the experiment file (kfchaos.spec.experiment_relative).
    candidate = experiment_relative(experiment_file, spec_file)
    return candidate if candidate.is_file() else None


def build_from_files(
    *,
    experiment: Path,
    records: Path,
    baseline: Path | None = None,
    metrics: Path | None = None,
    run_state: Path | None = None,
) -> Verdict:
    """The verdict `kfchaos verdict` gives on these files (a run folder's re-judgment)."""
    args = argparse.Namespace(
        experiment=str(experiment),
        records=str(records),
        baseline=None if baseline is None else str(baseline),
        metrics=None if metrics is None else str(metrics),
        run_state=None if run_state is None else str(run_state),
        faults_verified=False,
    )
    return judge(args)[0]


def judge(args: argparse.Namespace) -> tuple[Verdict, Experiment, MetricsSnapshot | None]:
    """The verdict on args.experiment, args.records and the optional args.baseline, args.metrics, args.run_state."""
    experiment_path = Path(args.experiment)
    experiment = load_experiment(experiment_path)
    baseline, warnings = _baseline(args, experiment_path, experiment)
    metrics = MetricsSnapshot.load(args.metrics) if args.metrics else None
    state = load_run_state(args.run_state) if args.run_state else RunState()
    verified = True if args.faults_verified else state.faults_verified
    verdict = evaluate(
        args.records,
        experiment,
        baseline=baseline,
        metrics=metrics,
        faults_verified=verified,
        # A stage whose records say the replay was cut (a full disk) or never finished is not whole.
        stage_valid={**state.stage_valid, **unfinished_stages(args.records)},
        faults_removed_at=state.faults_removed_at,
        fault_coverage=stage_activities(state.fault_windows) if state.fault_windows else None,
        warnings=[*getattr(args, "seal_warnings", []), *warnings],
        recorded_recovery=state.recovery,
    )
    return verdict, experiment, metrics
