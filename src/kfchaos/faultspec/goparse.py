"""Go's parsers that Chaos Mesh's webhook applies to fault fields, ported so kfchaos refuses exactly their inputs.

- `parse_duration`: Go's time.ParseDuration (go/src/time/format.go), used for `duration`, NetworkChaos
  latency/jitter, IOChaos delay (api/v1alpha1/common_webhook.go Duration) and TimeChaos timeOffset
  (timechaos_webhook.go TimeOffset).
- `parse_float`: Go's strconv.ParseFloat (go/src/strconv/atof.go), used by FloatStr fields and inside
  go-units.
- `from_human_size`: github.com/docker/go-units v0.5.0 size.go FromHumanSize (the version chaos-mesh's
  api/go.mod pins), used for StressChaos memory sizes (stresschaos_webhook.go Bytes).

Each raises ValueError with Go's message. tests/contract/test_goparse.py checks them against the Go code
itself (built from the module proxy) on a corpus of odd inputs.
"""

from __future__ import annotations

import math
import re
import struct

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9}
_UNITS_NS["h"] = 3600 * 10**9
_MAX = 1 << 63


def parse_duration(text: str) -> float:
    """time.ParseDuration in seconds, or ValueError('time: invalid duration "x"' and the like)."""
    return parse_duration_ns(text) / 1e9


def parse_duration_ns(text: str) -> int:
    """time.ParseDuration: nanoseconds, or ValueError with Go's message."""
    raw = text.encode()
    orig = text

    def error(message: str) -> ValueError:
        return ValueError(f'time: {message} "{orig}"')

    neg = False
    if raw[:1] in (b"-", b"+"):
        neg, raw = raw[:1] == b"-", raw[1:]
    if raw == b"0":
        return 0
    if not raw:
        raise error("invalid duration")
    total = 0
    while raw:
        if not (raw[0] == ord(".") or 48 <= raw[0] <= 57):
            raise error("invalid duration")
        i, whole = 0, 0
        while i < len(raw) and 48 <= raw[i] <= 57:  # leadingInt: overflow is an error
            if whole > _MAX // 10:
                raise error("invalid duration")
            whole = whole * 10 + raw[i] - 48
            if whole > _MAX:
                raise error("invalid duration")
            i += 1
        pre, raw = i > 0, raw[i:]
        frac, scale, post = 0, 1.0, False
        if raw[:1] == b".":
            raw = raw[1:]
            i, overflow = 0, False
            while i < len(raw) and 48 <= raw[i] <= 57:  # leadingFraction: stops accumulating on overflow
                if not overflow:
                    if frac > (_MAX - 1) // 10:
                        overflow = True
                    else:
                        following = frac * 10 + raw[i] - 48
                        if following > _MAX:
                            overflow = True
                        else:
                            frac, scale = following, scale * 10
                i += 1
            post, raw = i > 0, raw[i:]
        if not pre and not post:
            raise error("invalid duration")
        i = 0
        while i < len(raw) and not (raw[i] == ord(".") or 48 <= raw[i] <= 57):
            i += 1
        if i == 0:
            raise error("missing unit in duration")
        unit_text, raw = raw[:i], raw[i:]
        unit = _UNITS_NS.get(unit_text.decode(errors="replace"))
        if unit is None:
            raise error(f'unknown unit "{unit_text.decode(errors="replace")}" in duration')
        if whole > _MAX // unit:
            raise error("invalid duration")
        whole *= unit
        if frac > 0:
            whole += int(float(frac) * (float(unit) / scale))
            if whole > _MAX:
                raise error("invalid duration")
        total += whole
        if total > _MAX:
            raise error("invalid duration")
    if not neg and total > _MAX - 1:
        raise error("invalid duration")
    return -total if neg else total


_HEX_FLOAT = re.compile(
    r"^[+-]?0[xX](_?[0-9a-fA-F])*(\.([0-9a-fA-F](_?[0-9a-fA-F])*)?)?[pP][+-]?[0-9](_?[0-9])*$", re.ASCII
)
_DEC_FLOAT = re.compile(r"^[+-]?(\d(_?\d)*(\.(\d(_?\d)*)?)?|\.\d(_?\d)*)([eE][+-]?\d(_?\d)*)?$", re.ASCII)
_SPECIAL = re.compile(r"^[+-]?(inf|infinity|nan)$", re.IGNORECASE)


def parse_float(text: str, bits: int = 64) -> float:
    """strconv.ParseFloat(text, bits): decimal and hexadecimal literals (underscores between digits), Inf,
    Infinity, NaN; a finite literal beyond float64 (or float32 with bits=32) is a range error."""
    if _SPECIAL.fullmatch(text):
        return float(text)
    if _HEX_FLOAT.fullmatch(text):
        body = text.replace("_", "")
        sign = -1.0 if body.startswith("-") else 1.0
        value = sign * float.fromhex(body.lstrip("+-"))
    elif _DEC_FLOAT.fullmatch(text):
        value = float(text.replace("_", ""))
    else:
        raise ValueError(f'strconv.ParseFloat: parsing "{text}": invalid syntax')
    try:
        if math.isinf(value) or (bits == 32 and math.isinf(struct.unpack("f", struct.pack("f", value))[0])):
            raise OverflowError
        if bits == 32:
            value = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        raise ValueError(f'strconv.ParseFloat: parsing "{text}": value out of range') from None
    return value


_DECIMAL = {ord("k"): 10**3, ord("m"): 10**6, ord("g"): 10**9, ord("t"): 10**12, ord("p"): 10**15}


def from_human_size(text: str) -> int:
    """go-units v0.5.0 FromHumanSize (parseSize with the decimal map). The suffix is case-insensitive: empty,
    `b`, or one of k m g t p followed by nothing, `b` or `ib` -- so `512MB`, `1GiB`, `1g`, `5 kb` pass and
    `512Mi`, `1KiBs` do not."""
    raw = text.encode()
    sep = max((raw.rfind(c) for c in b"01234567890. "), default=-1)
    if sep == -1:
        raise ValueError(f"invalid size: '{text}'")
    if raw[sep] != ord(" "):
        num, suffix = raw[: sep + 1], raw[sep + 1 :]
    else:
        num, suffix = raw[:sep], raw[sep + 1 :]
    size = parse_float(num.decode(errors="replace"))
    if size < 0:
        raise ValueError(f"invalid size: '{text}'")
    if not suffix:
        return _int64(size)
    bad = ValueError(f"invalid suffix: '{suffix.lower().decode(errors='replace')}'")
    if len(suffix) > 3:
        raise ValueError(f"invalid suffix: '{suffix.decode(errors='replace')}'")
    suffix = suffix.lower()
    if suffix[0] == ord("b"):
        if len(suffix) > 1:
            raise bad
        return _int64(size)
    if suffix[0] not in _DECIMAL:
        raise bad
    size *= _DECIMAL[suffix[0]]
    if (len(suffix) == 2 and suffix[1] != ord("b")) or (len(suffix) == 3 and suffix[1:] != b"ib"):
        raise bad
    return _int64(size)


def _int64(value: float) -> int:
    """Go's int64(float64): truncation; NaN and out-of-range values are implementation-defined in Go, and read
    as the minimum int64 on amd64 (CVTTSD2SI). Either way go-units does not refuse them."""
    if math.isnan(value) or math.isinf(value) or not -(2**63) <= int(value) < 2**63:
        return -(2**63)
    return int(value)
