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

import copy
import math
import re
from dataclasses import dataclass
from typing import Any

from kfchaos.faultspec import goparse
from kfchaos.faultspec.crdschema import validate_chaos_object

PERCENT_MODES = ("fixed-percent", "random-max-percent")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT")
RATE_UNITS = ("kbit", "mbit", "gbit", "tbit", "tbps", "gbps", "mbps", "kbps", "bps", "bit")
_ATOI = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi accepts (base 10, ASCII digits, optional sign)
_UINT = re.compile(r"[0-9]+")


def atoi(text: str) -> int | None:
    """Go's strconv.Atoi on `text`, None where it returns an error (also beyond int64)."""
    if not _ATOI.fullmatch(text):
        return None
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 19:  # beyond int64 however many leading zeros come first
        return None
    value = int(text[0] + (digits or "0")) if text[0] in "+-" else int(digits or "0")
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
            if _UINT.fullmatch(number) and int(number) < 2**64:
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


# ---------------------------------------------------------------- the webhook on a whole object
# What Chaos Mesh's validating webhook v<kind>.kb.io answers for a rendered object (chaos-mesh/chaos-mesh
# v2.8.x = master for these files). Its Go validators run through api/genericwebhook (validater.go): every
# field whose type implements `Validate(root, path)` or carries a `webhook:"Name"` tag is checked, nil
# pointers skipped. The mutating webhook runs first, so defaulted fields (direction "to", correlation "0",
# jitter "0ms", selector namespaces) are never empty here. Notable, read from the code:
# - `Stressor.Validate(parent *field.Path)` does not have the FieldValidator signature, so stress workers are
#   never checked by the webhook (the CRD only caps them at 8192; kfchaos's own limit is 1..64).
# - memory sizes go through docker/go-units v0.5.0 FromHumanSize: `512Mi` is refused, `512MiB`, `1g`, `5 kb`
#   and a bare `512` are admitted (kfchaos.faultspec.goparse.from_human_size).
# - `duration` may be empty or any Go duration, negative ones included (common_webhook.go Duration).
# - container-kill needs containerNames (podchaos_webhook.go); TimeChaos timeOffset must parse as a Go
#   duration and may not be empty (timechaos_webhook.go TimeOffset).


def _go_error(parse: Any, text: str) -> str | None:
    try:
        parse(text)
    except ValueError as exc:
        return str(exc)
    return None


def _selector_problems(path: str, holder: dict[str, Any]) -> list[str]:
    mode, value = holder.get("mode"), holder.get("value")
    problem = mode_value_problem(str(mode), None if value is None else str(value))
    if problem is None or mode not in ("fixed", *PERCENT_MODES):
        return []
    return [f"{path}.value: {problem}"]


def _duration_field(path: str, value: Any, allow_empty: bool = True) -> list[str]:
    if value is None or (allow_empty and value == ""):
        return []
    error = _go_error(goparse.parse_duration_ns, str(value))
    return [f"{path}: parse duration field error: {error}"] if error else []


def _network_problems(spec: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for block, fields in (
        ("delay", ("correlation",)),
        ("loss", ("loss", "correlation")),
        ("duplicate", ("duplicate", "correlation")),
        ("corrupt", ("corrupt", "correlation")),
    ):
        holder = spec.get(block)
        if not isinstance(holder, dict):
            continue
        for name in fields:
            if name in holder and _go_error(lambda s: goparse.parse_float(s, 32), str(holder[name])):
                problems.append(f"spec.{block}.{name}: parse correlation field error: {holder[name]!r}")
        if block == "delay":
            problems += _duration_field("spec.delay.latency", holder.get("latency"))
            problems += _duration_field("spec.delay.jitter", holder.get("jitter"))
    bandwidth = spec.get("bandwidth")
    if isinstance(bandwidth, dict) and "rate" in bandwidth:
        problem = rate_problem(str(bandwidth["rate"]))
        if problem:
            problems.append(f"spec.bandwidth.rate: {problem}")
    if spec.get("action") != "partition":
        problem = direction_problem(
            str(spec.get("direction") or "to"), spec.get("target") is not None, "externalTargets" in spec, False
        )
        if problem:
            problems.append(f"spec.direction: {problem}")
    return problems


def _stress_problems(spec: dict[str, Any]) -> list[str]:
    stressors = spec.get("stressors")
    if not spec.get("stressngStressors") and not stressors:
        return ["spec: missing stressors"]
    if isinstance(stressors, dict) and stressors.get("memory") is None and stressors.get("cpu") is None:
        return ["spec.stressors: missing stressors"]
    size = str(((stressors or {}).get("memory") or {}).get("size") or "")
    if not size:
        return []
    if size.endswith("%"):
        problem = size_percent_problem(size)
        return [f"spec.stressors.memory.size: incorrect bytes format: {problem}"] if problem else []
    error = _go_error(goparse.from_human_size, size)
    return [f"spec.stressors.memory.size: incorrect bytes format: {error}"] if error else []


def _http_problems(spec: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    port = spec.get("port", 0)
    if not isinstance(port, int) or port <= 0:
        problems.append(f"spec.port: port {port} is not supported")
    problem = http_method_problem(spec.get("method"), str(spec.get("target")))
    if problem:
        problems.append(f"spec.method: {problem}")
    if spec.get("target") not in ("Request", "Response"):
        problems.append(f"spec.target: target {spec.get('target')} is not supported")
    if "delay" in spec:
        problems += _duration_field("spec.delay", spec["delay"], allow_empty=False)
    return problems


def _io_problems(spec: dict[str, Any]) -> list[str]:
    problems = _duration_field("spec.delay", spec.get("delay"))
    if spec.get("action") == "fault" and not spec.get("errno"):
        problems.append("spec.errno: action fault: errno 0 is not supported")
    percent = spec.get("percent")
    if isinstance(percent, int) and not 0 <= percent <= 100:
        problems.append("spec.percent: percent field should be in 0-100")
    return problems


def _time_problems(spec: dict[str, Any]) -> list[str]:
    error = _go_error(goparse.parse_duration_ns, str(spec.get("timeOffset", "")))
    return [f"spec.timeOffset: parse timeOffset field error:{error}"] if error else []


def _pod_problems(spec: dict[str, Any]) -> list[str]:
    if spec.get("action") == "container-kill" and not spec.get("containerNames"):
        return ["spec.containerNames: the name of container is required on container-kill action"]
    return []


_KIND_RULES = {
    "PodChaos": _pod_problems,
    "NetworkChaos": _network_problems,
    "StressChaos": _stress_problems,
    "HTTPChaos": _http_problems,
    "IOChaos": _io_problems,
    "TimeChaos": _time_problems,
}


# Kinds whose `spec.duration` the webhook parses: the field carries `webhook:"Duration"` in every kind's spec
# but TimeChaos's (api/v1alpha1/timechaos_types.go, `Duration *string json:"duration,omitempty"`, no tag), so
# a TimeChaos with duration "1d" is admitted (the real webhook did; tests/cluster/test_contract_real.py).
_UNCHECKED_DURATION = ("TimeChaos",)

# Fields the mutating webhook m<kind>.kb.io fills when empty, from their `default:` tags (Duration.Default and
# FloatStr.Default in api/v1alpha1/common_webhook.go): NetworkChaos's DelaySpec jitter "0ms" and the
# correlation of delay, reorder, loss, duplicate and corrupt "0" (api/v1alpha1/networkchaos_types.go). The API
# server runs mutating admission before the CRD schema and the validating webhook, so `jitter: ""` is admitted.
_NETWORK_DEFAULTS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("delay",), "jitter", "0ms"),
    (("delay",), "correlation", "0"),
    (("delay", "reorder"), "correlation", "0"),
    (("loss",), "correlation", "0"),
    (("duplicate",), "correlation", "0"),
    (("corrupt",), "correlation", "0"),
)


def mutated(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` as Chaos Mesh's mutating webhook leaves it, for the fields that change an admission answer."""
    if manifest.get("kind") != "NetworkChaos" or not isinstance(manifest.get("spec"), dict):
        return manifest
    out = copy.deepcopy(manifest)
    for path, name, default in _NETWORK_DEFAULTS:
        holder: Any = out["spec"]
        for key in path:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and holder.get(name, "") == "":
            holder[name] = default
    return out


def webhook_problems(manifest: dict[str, Any]) -> list[str]:
    """What Chaos Mesh's validating webhook v<kind>.kb.io refuses in a chaos-mesh.org object (as the mutating
    webhook left it: `mutated`); [] when it admits it. Not the CRD schema (kfchaos.faultspec.crdschema) nor
    vauth.kb.io (the requester's rights)."""
    spec = manifest.get("spec") or {}
    problems = _selector_problems("spec", spec)
    if isinstance(spec.get("target"), dict) and manifest.get("kind") == "NetworkChaos":
        problems += _selector_problems("spec.target", spec["target"])
    if manifest.get("kind") not in _UNCHECKED_DURATION:
        problems += _duration_field("spec.duration", spec.get("duration"))
    rules = _KIND_RULES.get(str(manifest.get("kind")))
    return problems + (rules(spec) if rules else [])


@dataclass(frozen=True)
class Verdict:
    """What the API server answers a create (or server-side dry run) of one object with: admitted, or refused
    with the reasons -- the CRD's schema (422) first, then the validating webhook (403)."""

    admitted: bool
    reasons: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "admitted" if self.admitted else f"refused ({'; '.join(self.reasons)})"


def verdict(manifest: dict[str, Any]) -> Verdict:
    """Whether a cluster running Chaos Mesh admits `manifest` (a chaos-mesh.org object), and why not. The API
    server runs the mutating webhook first, then checks the schema before calling the validating webhook, so a
    schema refusal is the whole answer."""
    manifest = mutated(manifest)
    schema = validate_chaos_object(manifest)
    if schema:
        return Verdict(False, tuple(f"schema: {p}" for p in schema))
    problems = webhook_problems(manifest)
    return Verdict(not problems, tuple(f"webhook: {p}" for p in problems))
