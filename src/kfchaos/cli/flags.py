"""Checks of flag values that several commands share, so each says the same thing: exit 3 before anything runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from kfchaos.errors import KfchaosError
from kfchaos.spec import endpoint_problem


def require_url(flag: str, value: str | None) -> None:
    """A URL flag (--target), where given, is a base URL to send to: the rule of spec.target.endpoint."""
    if value:
        problem = endpoint_problem(value)
        if problem:
            raise KfchaosError(f"{flag}: {problem}")


def add_demo_run_flags(parser: argparse.ArgumentParser, baseline_for: str) -> None:
    """--runs, --root and --baseline-seconds: what every command that runs the demo's chaos runs locally takes.
    `baseline_for`: whose control baseline --baseline-seconds sizes, in its help."""
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where run folders go (default: runs/)")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="the repository whose commit the audit records (default: .)"
    )
    parser.add_argument(
        "--baseline-seconds",
        type=float,
        default=15.0,
        help=f"least fault-free replay per stage rate for {baseline_for}",
    )
