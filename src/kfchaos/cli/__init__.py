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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kfchaos", description="Chaos engineering as code for Kubeflow Pipelines.")
    parser.add_argument("--version", action="version", version=f"kfchaos {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    package = importlib.import_module(__name__)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
