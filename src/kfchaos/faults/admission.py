"""Chaos Mesh's admission rules and pod selection arithmetic, as the one place kfchaos states them.

Chaos Mesh's validating webhooks (`v<kind>.kb.io`, helm/chaos-mesh/templates/validating-admission-webhooks.yaml)
refuse on create *and on dry run* what its Go validators reject; kfchaos refuses the same values at
`kfchaos validate` time (params.py, spec.py and safety.py call these functions) so a nightly run never
meets them. Each rule cites its upstream source (chaos-mesh/chaos-mesh master, v2.7 line):

- mode value: `strconv.Atoi` for fixed, fixed-percent and random-max-percent; fixed > 0, percents in
  (0, 100] (api/v1alpha1/common_webhook.go, PodSelector.Validate). `12.5` is refused.
- network direction: for the netem actions (delay, loss, duplicate, corrupt, bandwidth, ...) `from` and
  `both` need `target`, and may not be used with `externalTargets`; partition is not checked
  (api/v1alpha1/networkchaos_webhook.go, NetworkChaosSpec.Validate).
- bandwidth rate: an unsigned integer (`strconv.ParseUint`) followed by one of kbit, mbit, gbit, tbit,
  tbps, gbps, mbps, kbps, bps, bit, case-insensitive (networkchaos_webhook.go, isValidRateUnit). `1.5mbps`
  is refused.
- stress size: `N%` with an integer N in [0, 100] (`strconv.Atoi`), else docker/go-units FromHumanSize
  (api/v1alpha1/stresschaos_webhook.go, Bytes.Validate). `80.5%` is refused.
- HTTP method (target Request): one of Go's net/http method constants, upper case
  (api/v1alpha1/httpchaos_webhook.go, HTTPMethod.Validate).

How many pods a mode hits: pkg/selector/generic/mode.go FilterObjectsByMode. Since "at least one object
should be selected" (chaos-mesh master) fixed-percent takes ceil(count * percent / 100); random-max-percent
draws a percentage uniformly from [0, max] and takes ceil(count * drawn / 100), which is 0 pods when it
draws 0; fixed takes min(value, count). Older releases used floor; the ceiling is the larger count, so
the safety cap is checked against it.
"""

from __future__ import annotations

import math
import re

PERCENT_MODES = ("fixed-percent", "random-max-percent")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT")
RATE_UNITS = ("kbit", "mbit", "gbit", "tbit", "tbps", "gbps", "mbps", "kbps", "bps", "bit")
_ATOI = re.compile(r"^[+-]?\d+$")  # what Go's strconv.Atoi accepts (base 10, optional sign)
_UINT = re.compile(r"^\d+$")


def atoi(text: str) -> int | None:
    """Go's strconv.Atoi on `text`, None where it returns an error (also beyond int64)."""
    if not _ATOI.match(text) or len(text) > 20:
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def mode_value_problem(mode: str, value: str | None) -> str | None:
    """Why Chaos Mesh's webhook refuses `value` for `mode`, or None. (one and all take no value: kfchaos'
    own rule, checked by the caller.)"""
    if mode not in ("fixed", *PERCENT_MODES):
        return None
    if value is None:
        return f"mode {mode} needs a value"
    number = atoi(value)
    if number is None:
        kind = "a whole number of pods" if mode == "fixed" else "a whole percentage (Chaos Mesh parses it as an int)"
        return f"value {value!r} must be {kind} for mode {mode}"
    if mode == "fixed" and number <= 0:
        return f"value {value!r} must be a whole number of pods >= 1 for mode fixed"
    if mode != "fixed" and not 0 < number <= 100:
        return f"value {value!r} must be a whole percentage in (0, 100] for mode {mode}"
    return None


def pods_hit(mode: str, value: str | None, count: int) -> tuple[int, int]:
    """(fewest, most) pods of `count` matching ones that Chaos Mesh selects for `mode`/`value`."""
    if count <= 0:
        return 0, 0
    if mode == "one":
        return 1, 1
    if mode == "all":
        return count, count
    number = atoi(value or "") or 0
    if mode == "fixed":
        hit = max(0, min(number, count))
        return hit, hit
    most = math.ceil(count * number / 100)
    if mode == "fixed-percent":
        return most, most
    return 0, most  # random-max-percent may draw 0 %


def worst_share(mode: str, value: str | None, count: int) -> float:
    """The largest share of `count` pods the mode can hit (for safety.max_pod_percent)."""
    return pods_hit(mode, value, count)[1] / count if count > 0 else 0.0


def rate_problem(rate: str) -> str | None:
    text = rate.strip().lower()
    for unit in RATE_UNITS:
        if text.endswith(unit):
            number = text[: -len(unit)].strip()
            if _UINT.match(number) and int(number) < 2**64:
                return None
            return f"rate {rate!r}: Chaos Mesh needs a whole number before {unit} (e.g. 1500kbps, not 1.5mbps)"
    return f"rate {rate!r} must be a whole number with one of {', '.join(RATE_UNITS)}"


def size_percent_problem(size: str) -> str | None:
    """The `N%` form of a stress size; other forms are checked by the size pattern."""
    if not size.endswith("%"):
        return None
    number = atoi(size[:-1])
    if number is None or not 0 <= number <= 100:
        return f"size {size!r}: a share of memory must be a whole percentage in [0, 100] (Chaos Mesh parses an int)"
    return None


def http_method_problem(method: str | None, target: str) -> str | None:
    if method is None or target != "Request" or method in HTTP_METHODS:
        return None
    return f"method {method!r} is not one Chaos Mesh accepts: {', '.join(HTTP_METHODS)} (upper case)"


def direction_problem(direction: str, has_target: bool, has_external: bool, partition: bool) -> str | None:
    if partition or direction not in ("from", "both"):
        return None
    if has_external:
        return f"direction {direction!r} cannot be used with external_targets (Chaos Mesh: netem actions only 'to')"
    if not has_target:
        return f"direction {direction!r} needs a target selector (the other side); without one use 'to'"
    return None
