"""JSON input files read with bounds: size capped before reading, nesting depth and number size refused as input
errors (KfchaosError, exit 3) naming the file, never a RecursionError or ValueError traceback. NaN and Infinity,
which Python's json accepts but JSON does not, are refused too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from kfchaos.errors import KfchaosError

# Audit records and run state are kilobytes (an audit record with every step's detail stays well under 1 MiB).
MAX_BYTES = 16 << 20


def _non_finite(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def load_json(path: str | Path, what: str, *, max_bytes: int = MAX_BYTES, finite_only: bool = True) -> Any:
    """The JSON document in `path` (`what` names it in messages). KfchaosError on any bad input; NaN and
    Infinity are bad input unless `finite_only` is False (files kfchaos itself writes with json.dumps)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise KfchaosError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise KfchaosError(f"{path}: {what} too large (over {max_bytes} bytes)")
    try:
        text = raw.decode("utf-8")
        return json.loads(text, parse_constant=_non_finite) if finite_only else json.loads(text)
    except UnicodeDecodeError as exc:
        raise KfchaosError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise KfchaosError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise KfchaosError(f"{path}: {what} nested too deeply") from None
    except ValueError as exc:  # NaN/Infinity; an integer over Python's int-string limit
        raise KfchaosError(f"{path}: {what}: {str(exc)[:200]}") from None
