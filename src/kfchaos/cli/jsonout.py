"""`--json` output shared by validate, render, compile and audit verify: one document on stdout, stable keys."""

from __future__ import annotations

import json
import sys
from typing import Any

from kfchaos.errors import Problem, format_path


def problem_dict(problem: Problem) -> dict[str, Any]:
    return {"file": problem.file, "line": problem.line, "path": format_path(problem.path), "message": problem.message}


def emit(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
