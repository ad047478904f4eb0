"""`kfchaos replay TRAFFIC --target URL ...`: replay one stage open-loop, print its summary, write records.

Exit codes: 0 the stage ran and is valid; 2 the stage is INVALID (the replayer fell behind, or no
requests) or no request got any response (a dead target: nothing measured), so any verdict on it would be
INCONCLUSIVE; 3 input or usage error (every flag is checked before the first request); 130 / 143 stopped by
SIGINT / SIGTERM, after writing the records taken until then, marked as cut by the signal (a verdict on them is
INCONCLUSIVE: kfchaos.termination).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kfchaos import safefile, termination
from kfchaos.bounds import MAX_CONCURRENCY, MAX_DURATION, MAX_FACTOR, MAX_SHARDS, MAX_TIMEOUT
from kfchaos.cli import EXIT_INCONCLUSIVE, EXIT_PASS
from kfchaos.cli.flags import require_url
from kfchaos.errors import KfchaosError
from kfchaos.records import REQUEST_SCHEMA
from kfchaos.traffic.api import run_stage
from kfchaos.traffic.formats import FORMATS
from kfchaos.traffic.http1 import parse_target
from kfchaos.traffic.httpsyntax import header_problem
from kfchaos.traffic.plan import ReplayPlan, settings_from_experiment
from kfchaos.traffic.progress import Progress
from kfchaos.traffic.recorder import read_records, write_parquet
from kfchaos.traffic.settings import APIS, NO_GOODPUT_SLO, ReplaySettings
from kfchaos.traffic.summary import StageSummary, summarize
from kfchaos.traffic.tagging import HeaderPolicy
from kfchaos.units import parse_duration
from kfchaos.validate import load_experiment


def _shard(text: str) -> tuple[int, int]:
    index, slash, count = text.partition("/")
    ok = slash and index.isdigit() and count.isdigit() and len(count) <= 5
    if not ok or not 0 <= int(index) < int(count) <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not i/n with 0 <= i < n <= {MAX_SHARDS} (e.g. 0/4)")
    return int(index), int(count)


def _duration(text: str, low: float = 0.0, high: float = MAX_DURATION) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not low < seconds <= high:
        raise argparse.ArgumentTypeError(f"must be above {low:g} s and at most {high:g} s")
    return seconds


def _timeout(text: str) -> float:
    return _duration(text, high=MAX_TIMEOUT)


def _lag(text: str) -> float:
    return _duration(text, low=-1.0)  # zero is a valid (strict) limit


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number") from None
    if not 0 < value <= MAX_FACTOR:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be a number above 0 and at most {MAX_FACTOR:g}")
    return value


def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}")
        return value

    return parse


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip(" \t")
    if not colon or not name:
        raise argparse.ArgumentTypeError("not 'Name: value'")
    problem = header_problem(name, value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return name, value


def check_out(path: str) -> None:
    """--out is checked before the replay: records a run cannot write would be lost after it."""
    out = Path(path)
    if out.is_dir():
        raise KfchaosError(f"--out {path}: is a directory")
    try:
        with safefile.Folder.open(out.parent) as folder:
            probe = f".kfchaos-write-test-{secrets.token_hex(6)}"
            folder.create(probe).close()
            folder.remove(probe)
    except OSError as exc:
        raise KfchaosError(f"--out {path}: cannot write there ({exc.strerror or type(exc).__name__})") from None
    if out.exists() and not os.access(out, os.W_OK):
        raise KfchaosError(f"--out {path}: file is not writable")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay recorded traffic open-loop against a target; records to Parquet, summary printed",
        description="Replay one stage of recorded (or synthetic) traffic open-loop. Exit 2 when the stage is "
        "INVALID because the replayer fell behind its schedule.",
    )
    parser.add_argument("traffic", nargs="?", metavar="TRAFFIC", help="traffic file (default: the experiment's)")
    parser.add_argument("--target", metavar="URL", help="base URL, e.g. http://127.0.0.1:8000 (required to replay)")
    parser.add_argument("--format", choices=FORMATS, help="traffic file format (default jsonl)")
    parser.add_argument(
        "--stage", type=_int_range(1, 100), metavar="P", help="percent of the recorded rate (default 100)"
    )
    parser.add_argument("--duration", type=_duration, metavar="D", help="stage length, e.g. 90s (default: file once)")
    parser.add_argument("--seed", type=_int_range(0, 2**63 - 1), metavar="S", help="sampling seed (default 0)")
    parser.add_argument("--shard", type=_shard, metavar="i/n", help="replay shard i of n (hash partition)")
    parser.add_argument("--api", choices=APIS, help="http (as recorded), openai-completions or openai-chat")
    parser.add_argument("--model", metavar="M", help="model name for the OpenAI APIs")
    parser.add_argument("--speed", type=_factor, help="time compression of the recording (default 1)")
    parser.add_argument("--rate", type=_factor, help="arrivals per second at 100 %% for prompt sets (sharegpt)")
    parser.add_argument("--timeout", type=_timeout, help="per-request timeout (default 30s)")
    parser.add_argument(
        "--concurrency",
        type=_int_range(1, MAX_CONCURRENCY),
        metavar="N",
        help="in-flight limit; beyond it requests drop",
    )
    parser.add_argument("--max-lag", type=_lag, help="p99 send lag above this makes the stage INVALID")
    parser.add_argument("--no-loop", action="store_true", help="do not restart the recording within --duration")
    parser.add_argument("--header", type=_header, action="append", default=[], metavar="'K: V'", help="add header")
    parser.add_argument("--strip-header", action="append", default=[], metavar="NAME", help="remove header")
    parser.add_argument(
        "--allow-credential",
        action="append",
        default=[],
        metavar="NAME",
        help="keep this recorded credential header (Authorization, Cookie, an API key's...); every other is dropped",
    )
    parser.add_argument("--out", metavar="FILE", help="write the per-request records here (Parquet)")
    parser.add_argument("--experiment", metavar="FILE", help="take traffic, target API, faults and SLOs from it")
    parser.add_argument(
        "--merge", nargs="+", metavar="PARQUET", help="summarize the record files of one stage's shards (no replay)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(func=run)


def build_settings(args: argparse.Namespace) -> ReplaySettings:
    overrides: dict[str, Any] = {}
    if args.experiment:
        experiment = load_experiment(args.experiment)
        stage = args.stage if args.stage is not None else experiment.spec.traffic.stages[-1]
        settings = settings_from_experiment(experiment, stage, Path(args.experiment).parent)
        if args.traffic:
            overrides.update(source=args.traffic, synthetic=None)
    else:
        if not args.traffic:
            raise KfchaosError("replay: give a TRAFFIC file, or --experiment")
        settings = ReplaySettings(stage=args.stage if args.stage is not None else 100, source=args.traffic)
    for option, name in (
        ("format", "format"),
        ("duration", "duration"),
        ("seed", "seed"),
        ("api", "api"),
        ("model", "model"),
        ("speed", "speed"),
        ("rate", "prompt_rate"),
        ("timeout", "timeout"),
        ("concurrency", "concurrency_limit"),
        ("max_lag", "max_send_lag_p99"),
    ):
        value = getattr(args, option)
        if value is not None:
            overrides[name] = value
    if args.shard:
        overrides["shard"], overrides["shards"] = args.shard
    if args.no_loop:
        overrides["loop"] = False
    if args.header or args.strip_header or args.allow_credential:
        policy = settings.headers
        overrides["headers"] = HeaderPolicy(
            add=policy.add + tuple(args.header),
            strip=policy.strip | {h.lower() for h in args.strip_header},
            allow_credentials=policy.allow_credentials | {name.strip().lower() for name in args.allow_credential},
            credential=policy.credential,
        )
    return replace(settings, **overrides)


def format_summary(summary: StageSummary) -> str:
    def ms(dist: dict[str, float] | None, key: str = "p99") -> str:
        return f"{dist[key] * 1000:.1f} ms" if dist else "-"

    lines = [
        f"stage {summary.stage}% shards {summary.shards or '-'}: "
        + (
            f"INVALID ({summary.invalid_reason})"
            if not summary.valid
            else "VALID"
            if summary.answered
            else "NO ANSWER (no request got a response from the target: nothing was measured)"
        ),
        f"  requests  intended {summary.intended}  sent {summary.sent}  completed {summary.completed}  "
        f"ok {summary.ok}  dropped {summary.dropped}",
        f"  rate      intended {summary.intended_rate:.1f}/s  achieved {summary.achieved_rate:.1f}/s "
        f"over {summary.duration:.1f} s",
        f"  latency   p50 {ms(summary.latency, 'p50')}  p99 {ms(summary.latency)}  "
        f"from intended p99 {ms(summary.latency_intended)}",
        f"  send lag  p50 {ms(summary.send_lag, 'p50')}  p99 {ms(summary.send_lag)}  max {ms(summary.send_lag, 'max')}",
        f"  errors    {', '.join(f'{k} {v}' for k, v in sorted(summary.errors.items())) or 'none'}",
    ]
    if summary.ttft is not None or summary.goodput is not None:
        lines.append(
            f"  llm       TTFT p99 {ms(summary.ttft)}  TPOT p99 {ms(summary.tpot)}  "
            f"ITL p99 of per-request p99 {ms(summary.itl_request_p99)}  "
            f"output {summary.output_tokens} tokens  goodput {summary.goodput or 0:.2f}/s"
        )
    if summary.long_context_requests:
        lines.append(f"  long-context burst requests {summary.long_context_requests}")
    lines.append(f"  plan      {summary.plan_hash}")
    return "\n".join(lines)


def merge(args: argparse.Namespace) -> int:
    """One stage's summary from its shards' Parquet files; the lag rules apply to the merged records."""
    missing = [p for p in args.merge if not Path(p).is_file()]
    if missing:
        raise KfchaosError(f"records file {missing[0]}: not found")
    try:
        table = read_records(args.merge)
    except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
        raise KfchaosError(f"records: cannot read as {len(REQUEST_SCHEMA)}-column kfchaos records: {exc}") from None
    stages = sorted(set(table.column("stage").to_pylist()))
    if len(stages) > 1:
        raise KfchaosError(f"records: the files hold several stages {stages}; merge one stage at a time")
    stage = stages[0] if stages else (args.stage or 0)
    goodput = NO_GOODPUT_SLO
    max_lag = 0.050
    duration = args.duration
    api = args.api or "http"
    if args.experiment:
        settings = settings_from_experiment(load_experiment(args.experiment), stage, Path(args.experiment).parent)
        goodput, max_lag, api = settings.goodput, settings.max_send_lag_p99, args.api or settings.api
        duration = duration if duration is not None else settings.duration
    summary = summarize(
        table,
        stage=stage,
        duration=duration,
        max_send_lag_p99=args.max_lag if args.max_lag is not None else max_lag,
        goodput=goodput,
        streaming=api != "http",
    )
    if args.out:
        write_parquet(table, args.out)
    print(json.dumps(summary.to_dict(), indent=2, sort_keys=True) if args.json else format_summary(summary))
    return EXIT_PASS if summary.valid and summary.answered else EXIT_INCONCLUSIVE


def run(args: argparse.Namespace) -> int:
    if args.merge:
        if args.out:
            check_out(args.out)
        return merge(args)
    if not args.target:
        raise KfchaosError("replay: --target URL is required (or --merge to summarize shard records)")
    require_url("--target", args.target)
    parse_target(args.target)  # every flag is checked before the first request goes out
    if args.out:
        check_out(args.out)
    plan = ReplayPlan(build_settings(args))
    progress = None if args.quiet else Progress(sys.stderr)
    churns = _churns(args, plan.settings)
    with contextlib.ExitStack() as stack:  # lora-adapter-churn loads, swaps and unloads beside the replay
        for churn in churns:
            stack.enter_context(churn)
        result = run_stage(plan, args.target, out=args.out, progress=progress, signals=True)
    for churn in churns:
        calls = len(churn.actions)
        bad = sum(1 for a in churn.actions if a.status not in (200, 404))
        verified = sum(high - low for low, high in churn.activity.verified)
        print(f"  lora churn {churn.fault.name}: {calls} call(s), {bad} refused, verified active {verified:.1f}s",
              file=sys.stderr)  # fmt: skip
    for line in result.report.describe():
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(result.summary.to_dict(), indent=2, sort_keys=True))
    else:
        print(format_summary(result.summary))
        if result.path:
            print(f"  records   {result.path} ({result.table.num_rows} rows)")
    if result.interrupted is not None:
        kept = f"the records up to then are in {result.path}, marked as cut" if result.path else "no --out: no records"
        print(f"kfchaos: stopped by {termination.name(result.interrupted)}; {kept}", file=sys.stderr)
        return termination.exit_code(result.interrupted)
    return EXIT_PASS if result.summary.valid and result.summary.answered else EXIT_INCONCLUSIVE


def _churns(args: argparse.Namespace, settings: ReplaySettings) -> list[Any]:
    """The experiment's lora-adapter-churn faults of this stage, on shard 0 only (kfchaos.faults.lorachurn)."""
    if not args.experiment or settings.shard != 0:
        return []
    from kfchaos.faults.lorachurn import stage_churns

    experiment = load_experiment(args.experiment)
    return stage_churns(experiment, settings.stage, args.target, lambda fault: [settings.stage], settings.duration)
