"""`kfchaos --version` and `kfchaos --help` answer without importing any command module (kfp, scipy, pyarrow,
pandas and kubernetes take seconds to import), and the overview lists exactly the commands the full parser has.
Checked by what gets imported, not by timing."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from kfchaos.cli import _declared_commands, build_parser

HEAVY = ("kfp", "scipy", "pyarrow", "pandas", "kubernetes", "numpy", "aiohttp", "kfchaos.cli.cmd_")

PROBE = """
import json, sys
from kfchaos.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split('.')[0] if not m.startswith('kfchaos') else m for m in sys.modules if m.startswith(%r)})
print(json.dumps({"code": code, "heavy": heavy}), file=sys.__stderr__)
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []])
def test_the_overview_imports_nothing_heavy(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *argv], capture_output=True, text=True, timeout=60, check=False
    )
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result["heavy"] == [], result
    assert result["code"] == (3 if not argv else 0)


def test_the_overview_lists_every_command_with_its_help() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    full = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert dict(_declared_commands()) == full
