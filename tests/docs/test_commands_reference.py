"""docs/commands.md is what the argument parser says (kfchaos.cli.reference): every command, flag and exit code.
Stale, this fails, naming the command that rewrites it."""

from __future__ import annotations

import re
import subprocess
import sys

from kfchaos.cli import build_parser
from kfchaos.cli.reference import commands_markdown
from tests.conftest import ROOT

DOC = ROOT / "docs" / "commands.md"


def test_the_committed_reference_is_what_the_parser_says() -> None:
    assert DOC.read_text() == commands_markdown(), (
        "docs/commands.md is stale: run `.venv/bin/python -m kfchaos.cli.reference > docs/commands.md`"
    )


def test_every_command_and_flag_is_in_it() -> None:
    text = DOC.read_text()
    parser = build_parser()
    commands = {a for a in parser._actions if a.dest == "command"}
    names = next(iter(commands)).choices  # type: ignore[attr-defined]
    for name, sub in names.items():
        assert f"## `kfchaos {name}`" in text, name
        for action in sub._actions:
            for flag in action.option_strings:
                assert flag in text, (name, flag)
    assert "| 5 | `doctor`" in text and "`kfchaos verdict`" in text and "--run DIR" in text


def test_a_changed_flag_makes_it_stale(tmp_path: object) -> None:
    """The check can fail: the reference generated with one more flag is not the committed file."""
    script = (
        "import sys; from kfchaos.cli import cmd_init, reference\n"
        "register = cmd_init.register\n"
        "def more(sub):\n"
        "    register(sub); sub.choices['init'].add_argument('--brand-new-flag')\n"
        "cmd_init.register = more\n"
        "sys.stdout.write(reference.commands_markdown())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert "--brand-new-flag" in done.stdout and done.stdout != DOC.read_text()
    assert re.search(r"## `kfchaos init`", done.stdout)
