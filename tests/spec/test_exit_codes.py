"""The exit-code contract (issue 13): a crash never reads as FAIL (1); it exits 4 with one line naming the details."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kfchaos import cli
from kfchaos.cli import EXIT_FAIL, EXIT_INTERNAL, EXIT_USAGE


def _crash(_args: argparse.Namespace) -> int:
    raise ZeroDivisionError("token=SEKRET123 at http://h/x?api_key=SEKRET456")


def _parser_with_crash(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kfchaos")
    sub = parser.add_subparsers()
    sub.add_parser("boom").set_defaults(func=_crash)
    return parser


def test_an_unhandled_exception_exits_internal_not_fail(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    monkeypatch.setattr(cli, "build_parser", _parser_with_crash)
    monkeypatch.setenv(cli.CRASH_DIR_ENV, str(tmp_path))
    code = cli.main(["boom"])
    assert code == EXIT_INTERNAL != EXIT_FAIL
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "kfchaos bug" in lines[0] and "ZeroDivisionError" in lines[0]
    report = Path(re.search(r"details in (\S+)", lines[0])[1])  # type: ignore[index]
    assert report.parent == tmp_path
    text = report.read_text()
    assert "Traceback" in text and "ZeroDivisionError" in text
    assert "SEKRET" not in text + err
    assert report.stat().st_mode & 0o077 == 0


def test_unwritable_crash_dir_still_exits_internal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(cli, "build_parser", _parser_with_crash)
    monkeypatch.setenv(cli.CRASH_DIR_ENV, str(blocker / "sub"))
    assert cli.main(["boom"]) == EXIT_INTERNAL
    assert "traceback above" in capsys.readouterr().err


def test_input_errors_keep_exit_3(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n")
    done = subprocess.run(
        [sys.executable, "-m", "kfchaos", "validate", str(bad)], capture_output=True, text=True, check=False
    )
    assert done.returncode == EXIT_USAGE, done.stderr
