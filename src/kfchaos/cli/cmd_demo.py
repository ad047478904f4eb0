"""`kfchaos demo`: the main job on the embedded default -- a real chaos experiment on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run a real chaos experiment on this machine against the bundled demo LLM server"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=["unsafe", "tuned"],
        help="run only this scenario (repeatable); default: both, side by side",
    )
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where run folders go (default: runs/)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the kfchaos checkout (default: .)")
    parser.add_argument("--baseline-seconds", type=float, default=15.0, help="fault-free traffic for the baseline")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kfchaos.demo.run import main

    return main(args.scenario or ["unsafe", "tuned"], args.root.resolve(), args.runs, args.baseline_seconds)
