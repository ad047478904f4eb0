"""The `kfchaos` command. Each subcommand lives in its own module `cmd_*.py` with a `register(subparsers)`
function, discovered at start-up, so parts of the tool can add commands without touching this file.

Exit codes (the contract CI jobs rely on): 0 pass, 1 fail, 2 inconclusive, 3 usage or input error.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from kfchaos import __version__
from kfchaos.errors import KfchaosError

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_INCONCLUSIVE = 2
EXIT_USAGE = 3


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
    package = importlib.import_module(__name__)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("cmd_"))
    if only is not None and f"cmd_{only}" in names:
        names = [f"cmd_{only}"]
    for name in names:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


def _command_word(argv: Sequence[str]) -> str | None:
    words = [a for a in argv if not a.startswith("-")]
    return words[0].replace("-", "_") if words else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_word(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.func(args)
    except KfchaosError as exc:
        print(f"kfchaos: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kfchaos: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_PASS
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
