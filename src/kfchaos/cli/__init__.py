"""The `kfchaos` command. Each subcommand lives in its own module `cmd_*.py` with a `register(subparsers)`
function, discovered at start-up, so parts of the tool can add commands without touching this file.

Exit codes (the contract CI jobs rely on): 0 pass, 1 fail, 2 inconclusive, 3 usage or input error, 4 internal
error (a kfchaos bug: never a verdict); `doctor` alone exits 5 when no cluster can be reached at all
(kfchaos.doctor.model.EXIT_NO_CLUSTER); 130 and 143 when SIGINT or SIGTERM stopped the command (kfchaos.termination:
faults removed, records kept and marked as cut, never a verdict). An exception nobody handled must not exit 1, which
reads as "the model server failed" in CI: it exits 4 with one line naming the bug report file that holds the traceback.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import pkgutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from kfchaos import __version__, safefile, termination
from kfchaos.errors import KfchaosError
from kfchaos.netsafe import for_terminal
from kfchaos.redact import redact

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_INCONCLUSIVE = 2
EXIT_USAGE = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = termination.EXIT_INTERRUPTED  # 130: SIGINT (Ctrl-C)
EXIT_TERMINATED = termination.EXIT_TERMINATED  # 143: SIGTERM (a pod evicted, a CI job cancelled)
# Where crash reports go (default: the system temporary folder).
CRASH_DIR_ENV = "KFCHAOS_CRASH_DIR"


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors, which would read as INCONCLUSIVE; ours exits 3."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every subcommand, or with just `only` (its module alone is imported: some commands
    import pyarrow, scipy or kfp, which would slow every other command's start)."""
    parser = _Parser(prog="kfchaos", description="Chaos engineering as code for Kubeflow Pipelines.")
    parser.add_argument("--version", action="version", version=f"kfchaos {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    names = _command_modules()
    if only is not None and f"cmd_{only}" in names:
        names = [f"cmd_{only}"]
    for name in names:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def _command_modules() -> list[str]:
    package = importlib.import_module(__name__)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("cmd_"))


def _declared_commands() -> list[tuple[str, str]]:
    """(name, help) of every subcommand, read from each cmd_*.py's source (`add_parser("name", help=...)`) without
    importing it: for start-up speed, since importing them all pulls in kfp, scipy and pyarrow (seconds), and
    `kfchaos --help` needs only their names and one line each."""
    found = []
    for name in _command_modules():
        spec = importlib.util.find_spec(f"{__name__}.{name}")
        if spec is None or spec.origin is None:
            continue
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_parser"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                text = next((k.value for k in node.keywords if k.arg == "help"), None)
                shown = text.value if isinstance(text, ast.Constant) and isinstance(text.value, str) else ""
                found.append((node.args[0].value, shown))
                break  # the module's first add_parser is its command; later ones are its actions
    return found


def _overview_parser() -> argparse.ArgumentParser:
    """The top-level parser for `kfchaos`, `kfchaos --help` and `--version`: every command listed, none imported."""
    parser = _Parser(prog="kfchaos", description="Chaos engineering as code for Kubeflow Pipelines.")
    parser.add_argument("--version", action="version", version=f"kfchaos {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, text in _declared_commands():
        subparsers.add_parser(name, help=text)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    words = [a for a in argv if not a.startswith("-")]
    return words[0].replace("-", "_") if words else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        word = _command_word(argv)
        if word is None:
            # No command (`--help`, `--version`, nothing): the overview parser answers without importing any
            # command module (for start-up speed); it lists every command and exits.
            overview = _overview_parser()
            overview.parse_args(argv)  # SystemExit 0 (help, version) or 3 (a bad option)
            overview.print_help(sys.stderr)
            return EXIT_USAGE
        parser = build_parser(word)
        args = parser.parse_args(argv)  # SystemExit 0 (help) or 3 (usage) passes through
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        code: int = args.func(args)
    except KfchaosError as exc:
        print(f"kfchaos: {for_terminal(exc)}", file=sys.stderr)  # the message may quote a server or a file
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kfchaos: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except termination.Interrupted as stopped:
        print(f"kfchaos: {stopped}", file=sys.stderr)
        return termination.exit_code(stopped.signum)
    except BrokenPipeError:
        return EXIT_PASS
    except Exception as exc:  # a bug in kfchaos, not a verdict and not the user's input
        return internal_error(exc)
    return code


def _write_crash_report(text: str) -> Path:
    folder = Path(os.environ.get(CRASH_DIR_ENV) or tempfile.gettempdir())
    path = folder / f"kfchaos-crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    # Private: the traceback names local paths; it is for the person who ran the command. A new file only: the
    # name is guessable, and a link planted at it in a shared /tmp must not be written through.
    with safefile.create(path, private=True) as handle:
        handle.write(text.encode("utf-8"))
    return path


def internal_error(exc: BaseException) -> int:
    """Report an unhandled exception as a kfchaos bug: one line on stderr, the traceback in a file; exit 4."""
    details = redact(
        f"kfchaos {__version__}\ncommand: {' '.join(sys.argv[:2])}\n\n" + "".join(traceback.format_exception(exc))
    )
    try:
        where = f"details in {_write_crash_report(details)}"
    except OSError:
        sys.stderr.write(details)
        where = "traceback above"
    print(
        f"kfchaos: internal error ({type(exc).__name__}): this is a kfchaos bug, not a verdict; {where} "
        "(please attach it to a bug report)",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
