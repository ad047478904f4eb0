"""Values as a person writes them: durations (`20m`, `200ms`, `1h30m`) and percentages (`15%`, `0.001%`).

Durations follow Go's `time.ParseDuration` grammar, because Chaos Mesh reads `spec.duration` with it,
minus the forms that invite mistakes: a bare number (seconds? milliseconds?) and negative values are
rejected, with the accepted forms in the message.
"""

from __future__ import annotations

import math
import re

DURATION_FORMS = "a number with a unit: ns, us, ms, s, m, h (e.g. 200ms, 30s, 20m, 1h30m)"

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: object) -> float:
    """Seconds in a Go-style duration string. Raises ValueError naming the accepted forms."""
    if isinstance(value, bool) or not isinstance(value, str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(f"unitless duration {value!r} is ambiguous; write {DURATION_FORMS}")
        raise ValueError(f"expected a duration string, got {type(value).__name__}; write {DURATION_FORMS}")
    text = value.strip()
    if not text:
        raise ValueError(f"empty duration; write {DURATION_FORMS}")
    if text.startswith("-"):
        raise ValueError(f"negative duration {value!r}; write {DURATION_FORMS}")
    pos = 0
    total = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"invalid duration {value!r}; write {DURATION_FORMS}")
    if not math.isfinite(total):
        raise ValueError(f"duration {value!r} is out of range")
    return total


def format_duration(seconds: float) -> str:
    """A Go duration string for `seconds`, the shortest exact form Chaos Mesh accepts (e.g. `1h30m`, `250ms`)."""
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"cannot format duration of {seconds} seconds")
    total_ms = round(seconds * 1000)
    if total_ms == 0:
        return "0s"
    if total_ms < 1000:
        return f"{total_ms}ms"
    total_s, ms = divmod(total_ms, 1000)
    hours, rest = divmod(total_s, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if ms:
        out += f"{secs}.{ms:03d}".rstrip("0") + "s"
    elif secs:
        out += f"{secs}s"
    return out


PERCENT_FORMS = "a percentage such as 15%, 0.5% or 0.001%"


def parse_percent(value: object) -> float:
    """A fraction in [0, 1] from `15%` (-> 0.15). Bare numbers are refused: is 0.5 half or half a percent?"""
    if not isinstance(value, str):
        raise ValueError(f"expected {PERCENT_FORMS}, got {value!r} (write the % sign)")
    text = value.strip()
    if not text.endswith("%"):
        raise ValueError(f"expected {PERCENT_FORMS}, got {value!r} (write the % sign)")
    try:
        number = float(text[:-1].strip())
    except ValueError:
        raise ValueError(f"invalid percentage {value!r}; write {PERCENT_FORMS}") from None
    if not math.isfinite(number) or number < 0 or number > 100:
        raise ValueError(f"percentage {value!r} must be between 0% and 100%")
    return number / 100.0


def format_percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"
