"""`kfchaos demo [up|down]`: the main job on the embedded default -- a real chaos experiment on this machine;
`up` keeps the demo stack running for one's own experiments (`run --local`), `down` stops it."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kfchaos.cli import EXIT_PASS, EXIT_USAGE
from kfchaos.cli.flags import add_demo_run_flags
from kfchaos.errors import KfchaosError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run a real chaos experiment on this machine against the bundled demo LLM server; "
        "`demo up` / `demo down` keep the demo stack running for your own experiments",
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=["run", "up", "down", "tune"],
        default="run",
        help="run (default): both scenarios, side by side; up: start server, proxy and Prometheus and print "
        "what to export and the `run --local` line; down: stop what `up` started; tune: the demo finds its own "
        "settings (`kfchaos tune` over the bundled grid, docs/tune.md)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help="run only this scenario (repeatable): unsafe, tuned, or an experiment file "
        "src/kfchaos/demo/experiments/NAME.yaml run against the tuned server and expected to give the verdict on "
        "its `# demo-expect:` line (see --list); default: unsafe and tuned. With `up`: the server settings, "
        "unsafe or tuned (default tuned)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios, one line each, and exit")
    parser.add_argument(
        "--engine",
        choices=["demo", "vllm"],
        default="demo",
        help="demo (default): the bundled demo LLM server; vllm: the real vLLM engine (`make vllm`) in a memory "
        "cgroup of the container's limit (needs root or a delegated cgroup hierarchy), scenarios unsafe and tuned",
    )
    add_demo_run_flags(parser, "the control baseline")
    parser.add_argument("--no-baseline", action="store_true", help="with `up`: skip recording the control baseline")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        from kfchaos.demo.runner.scenarios import scenario_lines

        print("\n".join(scenario_lines()))
        return EXIT_PASS
    if args.engine != "demo" and args.action != "run":
        raise KfchaosError(f"--engine {args.engine} runs the demo's two scenarios only, not `demo {args.action}`")
    if args.action == "up":
        from kfchaos.demo.runner.scenarios import SCENARIOS
        from kfchaos.demo.runner.up import up, write_env

        scenario = (args.scenario or ["tuned"])[-1]
        if scenario not in SCENARIOS:
            raise KfchaosError(
                f"demo up --scenario takes the server settings {' or '.join(SCENARIOS)}, not {scenario!r}"
            )
        state = up(args.runs, scenario, args.baseline_seconds, with_baseline=not args.no_baseline)
        print(state.instructions(write_env(state, args.runs)))
        return EXIT_PASS
    if args.action == "down":
        from kfchaos.demo.runner.up import down

        stopped = down(args.runs)
        print(f"demo stack down ({stopped} process(es) stopped)" if stopped else "no demo stack was up")
        return EXIT_PASS
    if args.action == "tune":
        from kfchaos.cli.cmd_tune import show
        from kfchaos.demo.runner.localtune import DEMO_GRID, DEMO_TUNE_EXPERIMENT, tune_locally

        result = tune_locally(DEMO_TUNE_EXPERIMENT, DEMO_GRID, args.root.resolve(), args.runs, args.baseline_seconds)
        # Beside the configurations' run folders: the page, and the JSON that `tune --from-json` draws it from again.
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        stem = args.runs / f"tune-{result.sweep.loaded.grid.metadata.name}-{stamp}"
        return show(result, as_json=False, page=stem.with_suffix(".html"), result_json=stem.with_suffix(".json"))
    from kfchaos.demo.runner.scenarios import main

    if args.engine == "vllm":
        from kfchaos.demo.stack.enginecheck import cannot_run

        why = cannot_run()
        if why is not None:
            print(f"kfchaos demo --engine vllm: {why}", file=sys.stderr)
            return EXIT_USAGE
    return main(
        args.scenario or ["unsafe", "tuned"], args.root.resolve(), args.runs, args.baseline_seconds, engine=args.engine
    )
