"""`kfchaos baseline capture|control|show`: capture a baseline from Prometheus into baselines/<name>.yaml,
add a control baseline to it (a fault-free replay at the experiment's stage rates), or check and print one
(schema, content hash, age)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kfchaos.baseline import BaselineScope, format_time, load_baseline, parse_time
from kfchaos.baselinecapture import capture
from kfchaos.cli import EXIT_PASS
from kfchaos.errors import KfchaosError
from kfchaos.metrics.catalog import Scope
from kfchaos.metrics.prometheus import PrometheusClient
from kfchaos.spec import Experiment, baseline_path, experiment_relative
from kfchaos.validate import load_experiment


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("baseline", help="capture a baseline from Prometheus, or show one")
    commands = parser.add_subparsers(dest="baseline_command", metavar="ACTION", parser_class=type(parser))
    grab = commands.add_parser("capture", help="capture baselines/<name>.yaml from Prometheus")
    grab.add_argument("--experiment", required=True, metavar="FILE")
    grab.add_argument("--prometheus", metavar="URL", help="default: spec.baseline.capture.prometheus")
    grab.add_argument("--days", type=int, help="window length in days (default: spec, else 7)")
    grab.add_argument(
        "--short-history",
        metavar="REASON",
        help="accept fewer than 7 days, or less history than asked, for this reason (recorded in the baseline)",
    )
    grab.add_argument("--end", metavar="TIME", help="RFC 3339 end of the window (default: spec, else now)")
    grab.add_argument(
        "--step",
        type=_duration,
        metavar="DURATION",
        help="interval of the per-interval P99s, e.g. 10s or 5m (default: spec.baseline.capture.step, else 5m)",
    )
    grab.add_argument("--pod", action="append", default=[], metavar="NAME", help="limit to these pods (repeatable)")
    grab.add_argument(
        "--query", action="append", default=[], metavar="NAME=PROMQL", help="replace or add a query (repeatable)"
    )
    grab.add_argument(
        "--out",
        metavar="PATH",
        help="default: spec.baseline.file (relative to the experiment), else <name>.baseline.yaml beside it",
    )
    grab.set_defaults(func=run_capture)
    control = commands.add_parser(
        "control",
        help="replay the experiment's traffic without faults at each stage rate and add it to the baseline file",
    )
    control.add_argument("--experiment", required=True, metavar="FILE")
    control.add_argument("--target", metavar="URL", help="endpoint to replay against (default: spec.target.endpoint)")
    control.add_argument(
        "--duration", metavar="DURATION", help="replay time per stage (default: spec.traffic.stage_duration)"
    )
    control.add_argument("--stage", action="append", type=int, default=[], metavar="PERCENT", help="repeatable")
    control.add_argument(
        "--baseline",
        metavar="PATH",
        help="default: spec.baseline.file (relative to the experiment), else <name>.baseline.yaml beside it",
    )
    control.set_defaults(func=run_control)
    show = commands.add_parser("show", help="check a baseline's schema and hash and print it")
    show.add_argument("file", metavar="FILE")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    parser.set_defaults(func=lambda args: parser.print_help(sys.stderr) or 3)


def _duration(text: str) -> float:
    """A duration as everywhere else (`10s`, `5m`); a bare number still means seconds, as it always did."""
    from kfchaos.units import parse_duration

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _baseline_file(given: str | None, experiment_file: str, experiment: Experiment) -> Path:
    """--out/--baseline as given (relative to the current directory, like every flag), else spec.baseline.file by
    the experiment's one path rule, else <name>.baseline.yaml beside the experiment file."""
    if given:
        return Path(given)
    return baseline_path(experiment_file, experiment) or experiment_relative(
        experiment_file, f"{experiment.metadata.name}.baseline.yaml"
    )


def _say_if_outside(path: Path) -> None:
    """Nothing is written outside the working directory's tree without saying so."""
    if not path.resolve().is_relative_to(Path.cwd().resolve()):
        print(f"note: writing outside the current directory: {path.resolve()}", file=sys.stderr)


def _user_queries(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, promql = item.partition("=")
        if not sep:
            raise KfchaosError(f"--query {item!r}: write NAME=PROMQL")
        out[name.strip()] = promql
    return out


def run_capture(args: argparse.Namespace) -> int:
    experiment = load_experiment(args.experiment)
    settings = experiment.spec.baseline.capture
    url = args.prometheus or (settings.prometheus if settings else None)
    if not url:
        raise KfchaosError(f"{args.experiment}: no Prometheus: give --prometheus or spec.baseline.capture.prometheus")
    end_text = args.end or (settings.end if settings else None)
    try:
        end = parse_time(end_text) if end_text else datetime.now(UTC)
    except ValueError as exc:
        raise KfchaosError(f"--end {end_text!r}: {exc}") from None
    windows = [(parse_time(w.start), parse_time(w.end)) for w in (settings.release_windows if settings else [])]
    try:  # the names reach PromQL matchers: Kubernetes names only (kfchaos.metrics.catalog.Scope)
        scope = Scope(experiment.spec.target.namespace, tuple(args.pod), model=experiment.spec.target.model)
    except ValueError as exc:
        raise KfchaosError(f"--pod: {exc}") from None
    try:
        baseline = capture(
            experiment.metadata.name,
            PrometheusClient(url),
            scope,
            end=end,
            days=args.days or (settings.days if settings else 7),
            # --step, else the experiment's own spec.baseline.capture.step, else 300 s.
            step=args.step or (settings.step if settings else 300.0),
            release_windows=windows,
            release_margin=settings.release_margin if settings else 1800.0,
            detect_releases=settings.detect_releases if settings else True,
            short_history=args.short_history or (settings.short_history if settings else None),
            user_queries=_user_queries(args.query),
            drift=experiment.spec.slo.p99_drift_max,
            request_timeout=experiment.spec.target.timeout,  # no baseline latency beyond it
            target=BaselineScope.of(experiment, args.pod),  # whose production: the verdict refuses another's
        )
    except ValueError as exc:
        raise KfchaosError(str(exc)) from None
    out = _baseline_file(args.out, args.experiment, experiment)
    _say_if_outside(out)
    baseline.write(out)
    for warning in baseline.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    stat = baseline.series["latency_p99"]
    window = (args.days or (settings.days if settings else 7)) * 86400.0
    covered = stat.intervals * baseline.provenance.step
    if covered < 0.5 * window:
        print(
            f"warning: the data covers {covered:g}s of the {window / 86400:g}-day window ({stat.intervals} intervals "
            f"of {baseline.provenance.step:g}s): Prometheus has little history for this target; the baseline "
            "describes that stretch only",
            file=sys.stderr,
        )
    print(
        f"{out}: latency P99 median {stat.median:.4g}s (spread {stat.spread:.2g}s, {stat.intervals} intervals), "
        f"{baseline.totals.requests:.0f} requests, {len(baseline.provenance.exclusions)} exclusion(s)"
    )
    return EXIT_PASS


def run_control(args: argparse.Namespace) -> int:
    from kfchaos.control import attach, record_control
    from kfchaos.units import parse_duration

    experiment = load_experiment(args.experiment)
    path = _baseline_file(args.baseline, args.experiment, experiment)
    if not path.is_file():
        raise KfchaosError(
            f"{path}: no baseline yet; capture the production figures first (kfchaos baseline capture), "
            "the control is stored beside them"
        )
    baseline, warnings = load_baseline(path)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    try:
        duration = parse_duration(args.duration) if args.duration else experiment.spec.traffic.stage_duration
    except ValueError as exc:
        raise KfchaosError(f"--duration {args.duration!r}: {exc}") from None
    records = path.with_name(f"{path.stem}.control.parquet")
    _say_if_outside(path)
    _warn_short_stages(experiment, Path(args.experiment).parent, duration, args.stage)
    control = record_control(
        experiment,
        args.target or experiment.spec.target.endpoint,
        records,
        base_dir=Path(args.experiment).parent,
        duration=duration,
        stages=args.stage or None,
    )
    attach(baseline, control).write(path)
    print(f"{path}: control baseline from {control.target}, records {records} (sha256 {control.records_sha256[:12]})")
    from kfchaos.verdict.stats import TAIL, quantile_ranks

    for stage in control.stages:
        p99 = "n/a" if stage.latency_p99 is None else f"{stage.latency_p99:.4g}s"
        print(f"  {stage.stage:>3}%  {stage.sent} sent, {stage.samples} latencies, P99 {p99}")
        # The verdict judges drift against the control's P99 interval (kfchaos.verdict.drift): without one, the
        # stage's p99_drift is INCONCLUSIVE whatever the run shows.
        if quantile_ranks(stage.samples, 1 - TAIL, experiment.spec.slo.confidence) is None:
            print(
                f"warning: control stage {stage.stage}%: {stage.samples} latencies are too few for a P99 interval at "
                f"{100 * experiment.spec.slo.confidence:g}% confidence: p99_drift at this stage will be INCONCLUSIVE; "
                "record a longer control (--duration)",
                file=sys.stderr,
            )
    return EXIT_PASS


def _warn_short_stages(experiment: Experiment, base_dir: Path, duration: float, stages: list[int]) -> None:
    """Before replaying: the stages whose control plan is too small for the P99 interval the drift check needs
    (the plan's count from kfchaos.verdict.samples, the interval rule from kfchaos.verdict.stats)."""
    from kfchaos.verdict.samples import stage_support
    from kfchaos.verdict.stats import TAIL, quantile_ranks

    try:
        support = stage_support(experiment, base_dir, duration)
    except (KfchaosError, OSError, ValueError):
        return  # the replay itself reports what is wrong with the plan
    confidence = experiment.spec.slo.confidence
    for entry in support:
        if (not stages or entry.stage in stages) and quantile_ranks(entry.planned, 1 - TAIL, confidence) is None:
            print(
                f"warning: control stage {entry.stage}%: {entry.planned} requests planned in {duration:g}s, too few "
                f"for a P99 interval at {100 * confidence:g}% confidence: p99_drift at this stage will be "
                "INCONCLUSIVE; give a longer --duration",
                file=sys.stderr,
            )


def run_show(args: argparse.Namespace) -> int:
    baseline, warnings = load_baseline(args.file)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(baseline.model_dump(mode="json"), indent=2))
        return EXIT_PASS
    p = baseline.provenance
    print(f"{args.file}: baseline for {baseline.experiment}, captured {baseline.captured_at} (hash ok)")
    print(f"  source   {p.prometheus}, {p.window.start} .. {p.window.end}, step {p.step:g}s")
    for exclusion in p.exclusions:
        print(f"  excluded {exclusion.start} .. {exclusion.end} ({exclusion.source}) {exclusion.reason}".rstrip())
    for name, stat in baseline.series.items():
        print(
            f"  {name:<12} median {stat.median:.4g}{stat.unit}  spread {stat.spread:.2g}  "
            f"p10..p90 {stat.p10:.4g}..{stat.p90:.4g}  ({stat.intervals} intervals)"
        )
    for warning in baseline.warnings:
        print(f"  warning  {warning}")
    t = baseline.totals
    print(f"  requests {t.requests:.0f}  error rate {t.error_rate}  OOM kills {t.oom_kills}")
    if baseline.latency_histogram:
        print(f"  buckets  {', '.join(f'{b:g}' for b in baseline.latency_histogram.bounds)} s")
    if baseline.control:
        c = baseline.control
        print(f"  control  {c.target}, {c.captured_at}, {c.stage_duration:g}s a stage, sha256 {c.records_sha256}")
        for stage in c.stages:
            interval = stage.latency_p99_interval
            shown = "n/a" if stage.latency_p99 is None else f"{stage.latency_p99:.4g}s"
            around = f" ({interval[0]:.4g}..{interval[1]:.4g})" if interval else ""
            print(f"    {stage.stage:>3}%  P99 {shown}{around}  {stage.samples} samples, {stage.errors} errors")
    print(f"  now {format_time(datetime.now(UTC))}")
    return EXIT_PASS
