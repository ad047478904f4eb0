"""Errors a person can act on: each problem names its file, line and field path."""

from __future__ import annotations

from dataclasses import dataclass

Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    """`spec.faults[0].params.latency` from ('spec', 'faults', 0, 'params', 'latency')."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(document)"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {format_path(self.path)}: {self.message}"


class KfchaosError(Exception):
    """Base of the errors the command line reports as input or usage errors (exit code 3)."""


class SpecError(KfchaosError):
    """An experiment (or other input file) failed validation; carries every problem found, not only the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class SafetyError(KfchaosError):
    """A safety guard refused an action; the message names the rule."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"refused by safety rule {rule}: {message}")
