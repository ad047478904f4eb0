"""docs/commands.md, generated from the argument parser itself, so it names every command, flag and exit code
there is (`python -m kfchaos.cli.reference > docs/commands.md`; tests/docs/test_commands_reference.py fails when
the committed file differs). Each command's section is its `--help`, subcommands' too, at a fixed width."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

from kfchaos.cli import (
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_PASS,
    EXIT_TERMINATED,
    EXIT_USAGE,
    build_parser,
)

WIDTH = 100
# `doctor` alone exits 5 (kfchaos.doctor.model.EXIT_NO_CLUSTER; not imported: it pulls in the cluster client).
EXIT_NO_CLUSTER = 5

EXIT_CODES = [
    (EXIT_PASS, "PASS, or the command did what was asked"),
    (EXIT_FAIL, "FAIL: the SLOs were broken under fault (`doctor`: a check failed; `audit verify`: a mismatch)"),
    (
        EXIT_INCONCLUSIVE,
        "INCONCLUSIVE: not enough evidence for PASS or FAIL (also a run that failed before its verdict)",
    ),
    (EXIT_USAGE, "usage or input error, naming the file, line and field, or the flag"),
    (EXIT_INTERNAL, "internal error: a kfchaos bug, never a verdict; one line names the crash report"),
    (EXIT_NO_CLUSTER, "`doctor`: the cluster cannot be reached at all (no check could be made)"),
    (EXIT_INTERRUPTED, "interrupted by SIGINT (Ctrl-C): faults removed, records kept and marked as cut"),
    (EXIT_TERMINATED, "stopped by SIGTERM (a pod evicted, a CI job cancelled): faults removed, records kept and cut"),
]


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse keeps its subcommands there; there is no public accessor
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _sections(parser: argparse.ArgumentParser, depth: int) -> Iterator[str]:
    yield f"{'#' * depth} `{parser.prog}`\n\n```\n{parser.format_help().rstrip()}\n```\n"
    for _, child in _subparsers(parser):
        yield from _sections(child, depth + 1)


def commands_markdown() -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps help to the terminal's width; the file must not depend on it
    try:
        parser = build_parser()
        parser.prog = "kfchaos"
        lines = [
            "# Commands\n",
            "Generated from the argument parser (`python -m kfchaos.cli.reference > docs/commands.md`): every command",
            "and flag, as `kfchaos COMMAND --help` prints it. Do not edit; tests/docs/test_commands_reference.py fails",
            "when this file is stale.\n",
            "## Exit codes, for every command\n",
            "| code | meaning |",
            "|---|---|",
            *(f"| {code} | {meaning} |" for code, meaning in EXIT_CODES),
            "",
            "A CI job that gates on kfchaos must treat 4 like any other tool failure (retry or page the owner of the",
            'pipeline), not as "the model server failed".\n',
        ]
        sections = [text for _, child in _subparsers(parser) for text in _sections(child, 2)]
        return "\n".join(lines) + "\n" + "\n".join(sections)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


if __name__ == "__main__":
    sys.stdout.write(commands_markdown())
