"""Fuzz the flag parser: every subcommand with its own flags given hostile values (nan, inf, negative, huge,
malformed URLs and paths, empty strings, options where values belong). Parsing must end in a Namespace or exit
0 (help) / 3 (usage error, never argparse's 2, which reads as INCONCLUSIVE). The commands that only read local
files also run to the end: a result, or an input error (exit 3) -- never a crash or an unbounded run."""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kfchaos.cli import build_parser
from tests.conftest import EXPERIMENTS, ROOT
from tests.fuzz.harness import assert_contract, bounded, budget, run_cli, warm

# Commands that run here only against local files (no cluster, KFP, Prometheus or network target).
RUNNABLE = {"validate", "schema", "render", "verdict", "audit", "baseline"}
VALUES = [
    "nan", "inf", "-inf", "-1", "0", "1e999", "9" * 400, "0x10", "", " ", "--", "-", "http://[::1", "http://",
    "ftp://x", "http://user:pw@127.0.0.1:9/?token=x", "/dev/null", "/nonexistent/x.yaml", "../x", "3/2", "0/0",
    "1/0", "10s", "-5m", "1e9h", "%", "\x00", "é", "a" * 300, str(EXPERIMENTS / "vllm-replica-kill.yaml"),
    str(ROOT / "baselines/vllm-replica-kill.yaml"), "--json", "--help",
]  # fmt: skip


def _commands() -> dict[str, list[list[str]]]:
    """{command words: [option strings of each optional flag]} from the real parser."""
    out: dict[str, list[list[str]]] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        options: list[list[str]] = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*words, name))
            elif action.option_strings and "-h" not in action.option_strings:
                options.append(list(action.option_strings))
        if words:
            out[" ".join(words)] = options

    walk(build_parser(), ())
    return out


COMMANDS = _commands()


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    words = draw(st.sampled_from(sorted(COMMANDS)))
    argv = words.split()
    for _ in range(draw(st.integers(0, 5))):
        choice = draw(st.integers(0, 3))
        if choice == 0 or not COMMANDS[words]:
            argv.append(draw(st.sampled_from(VALUES)))
        else:
            argv.append(draw(st.sampled_from(draw(st.sampled_from(COMMANDS[words])))))
            if draw(st.integers(0, 4)):
                argv.append(draw(st.one_of(st.sampled_from(VALUES), st.text(max_size=8))))
    return argv


def _parse(argv: list[str]) -> tuple[str, Any]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser(argv[0]).parse_args(argv)
        except SystemExit as exc:
            return "exit", exc.code
    return "parsed", None


def test_every_command_is_fuzzed() -> None:
    assert {"validate", "verdict", "replay", "render", "baseline show", "audit verify"} <= set(COMMANDS)


@settings(max_examples=budget(40))
@given(argv=argvs())
def test_parsing_ends_in_a_namespace_or_exit_0_or_3(argv: list[str]) -> None:
    warm()
    outcome = bounded(lambda: _parse(argv))
    assert outcome.broke is None and outcome.error is None, (argv, outcome)
    kind, code = outcome.value
    assert kind == "parsed" or code in (0, 3), (argv, code)


@settings(max_examples=budget(20))
@given(argv=argvs().filter(lambda a: a[0] in RUNNABLE and a[:2] != ["baseline", "capture"]))
def test_local_commands_end_in_a_result_or_an_input_error(argv: list[str]) -> None:
    assume("--out" not in argv)  # writes reports: kept out so the fuzz never writes into the checkout
    result = run_cli(argv)
    assert_contract(result)
