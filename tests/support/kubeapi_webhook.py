"""The loopback API server's model of Chaos Mesh's validating webhooks (v<kind>.kb.io), written from the Go
source and kept apart from kfchaos' own rules (kfchaos.faultspec.admission), so a test of one against the
other can fail. chaos-mesh/chaos-mesh master (= v2.8.3 for these files), through api/genericwebhook/validater.go:

- api/v1alpha1/common_webhook.go: PodSelector.Validate (mode values through strconv.Atoi), Percent (0-100),
  FloatStr (strconv.ParseFloat), Duration (time.ParseDuration).
- api/v1alpha1/networkchaos_webhook.go: NetworkChaosSpec.Validate (direction vs target/externalTargets,
  partition exempt), Rate (isValidRateUnit: unsigned integer + unit).
- api/v1alpha1/stresschaos_webhook.go: Bytes (N% with Atoi in [0, 100], else docker/go-units v0.5.0
  FromHumanSize, the version api/go.mod pins: `512Mi` is refused). Workers are never checked (see _stress).
- api/v1alpha1/podchaos_webhook.go: container-kill needs containerNames.
- api/v1alpha1/timechaos_webhook.go: timeOffset (time.ParseDuration, empty refused).
- api/v1alpha1/httpchaos_webhook.go: Port > 0, HTTPMethod (net/http constants, target Request only).
- api/v1alpha1/iochaos_webhook.go: IOErrno != 0 for action fault.

Messages are shaped like k8s.io/apimachinery field.Error: `PATH: Invalid value: "V": DETAIL`.
"""

from __future__ import annotations

import re
from typing import Any

# Go's parsers, ported and checked against the Go code itself (tests/contract/test_goparse.py); the rules
# that use them here are written from the webhook source apart from kfchaos.faultspec.admission.
from kfchaos.faultspec import goparse

_ATOI = re.compile(r"[+-]?[0-9]+")
_RATE_UNITS = ("kbit", "mbit", "gbit", "tbit", "tbps", "gbps", "mbps", "kbps", "bps", "bit")
_METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT"}
_NETEM = ("delay", "loss", "duplicate", "corrupt", "reorder")


def _invalid(path: str, value: Any, detail: str) -> str:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def _atoi_error(value: str) -> str | None:
    if _ATOI.fullmatch(value):
        return None
    return f'strconv.Atoi: parsing "{value}": invalid syntax'


def _selector(path: str, holder: dict[str, Any]) -> list[str]:
    mode, value = holder.get("mode"), str(holder.get("value") or "")
    errors = []
    if mode in ("fixed", "fixed-percent", "random-max-percent"):
        parse = _atoi_error(value)
        if parse:
            return [_invalid(f"{path}.value", value, f"parse value field error:{parse}")]
        number = int(value)
        if mode == "fixed" and number <= 0:
            errors.append(_invalid(f"{path}.value", value, f"value must be greater than 0 with mode:{mode}"))
        if mode != "fixed" and not 0 < number <= 100:
            errors.append(
                _invalid(f"{path}.value", value, f"value of {number} is invalid, Must be (0,100] with mode:{mode}")
            )
    return errors


def _rate(path: str, rate: str) -> list[str]:
    text = rate.strip().lower()
    for unit in _RATE_UNITS:
        if text.endswith(unit):
            number = text[: -len(unit)].strip()
            if re.fullmatch(r"[0-9]+", number):
                return []
            return [
                _invalid(path, rate, f'parse rate field error:strconv.ParseUint: parsing "{number}": invalid syntax')
            ]
    return [_invalid(path, rate, "parse rate field error:invalid unit")]


def _network(spec: dict[str, Any]) -> list[str]:
    errors = []
    for action in _NETEM:
        block = spec.get(action)
        if not isinstance(block, dict):
            continue
        for key in (action, "correlation"):  # FloatStr: strconv.ParseFloat(s, 32); delay has no `delay` key
            if key in block:
                try:
                    goparse.parse_float(str(block[key]), 32)
                except ValueError as exc:
                    errors.append(_invalid(f"spec.{action}.{key}", block[key], f"parse correlation field error:{exc}"))
        if action == "delay":
            errors += _duration("spec.delay.latency", block.get("latency"))
            errors += _duration("spec.delay.jitter", block.get("jitter"))
    for key in ("bandwidth", "rate"):
        block = spec.get(key)
        if isinstance(block, dict) and "rate" in block:
            errors += _rate(f"spec.{key}.rate", str(block["rate"]))
    if spec.get("action") == "partition":
        return errors
    direction = spec.get("direction") or "to"
    if direction in ("from", "both") and spec.get("externalTargets") is not None:
        detail = "external targets cannot be used with `from` and `both` direction in netem action yet"
        errors.append(_invalid("spec.direction", direction, detail))
    if direction in ("from", "both") and spec.get("target") is None:
        detail = "`from` and `both` direction cannot be used when targets is empty in netem action"
        errors.append(_invalid("spec.direction", direction, detail))
    return errors


def _stress(spec: dict[str, Any]) -> list[str]:
    """stresschaos_webhook.go: StressChaosSpec and Stressors need a stressor; Bytes is `N%` (Atoi, 0-100) or
    go-units v0.5.0 FromHumanSize. `Stressor.Validate(parent)` lacks the FieldValidator signature, so
    genericwebhook never calls it: workers are not checked here (only the CRD's maximum 8192 is)."""
    stressors = spec.get("stressors")
    if not spec.get("stressngStressors") and not stressors:
        return [_invalid("spec", "", "missing stressors")]
    if isinstance(stressors, dict) and stressors.get("memory") is None and stressors.get("cpu") is None:
        return [_invalid("spec.stressors", "", "missing stressors")]
    errors = []
    memory = (stressors or {}).get("memory") or {}
    size = str(memory.get("size") or "")
    if size.endswith("%"):
        parse = _atoi_error(size[:-1])
        if parse:
            errors.append(_invalid("spec.stressors.memory.size", size, f"incorrect bytes format: {parse}"))
        elif not 0 <= int(size[:-1]) <= 100:
            errors.append(_invalid("spec.stressors.memory.size", size, "incorrect bytes format: illegal proportion"))
    elif size:
        try:
            goparse.from_human_size(size)
        except ValueError as exc:
            errors.append(_invalid("spec.stressors.memory.size", size, f"incorrect bytes format: {exc}"))
    return errors


def _duration(path: str, value: Any, allow_empty: bool = True) -> list[str]:
    """common_webhook.go Duration (empty allowed) and httpchaos_webhook.go Delay / timechaos_webhook.go
    TimeOffset (empty refused): Go's time.ParseDuration."""
    if value is None or (allow_empty and value == ""):
        return []
    try:
        goparse.parse_duration_ns(str(value))
    except ValueError as exc:
        return [_invalid(path, value, f"parse duration field error: {exc}")]
    return []


def _time(spec: dict[str, Any]) -> list[str]:
    return _duration("spec.timeOffset", spec.get("timeOffset", ""), allow_empty=False)


def _pod(spec: dict[str, Any]) -> list[str]:
    """podchaos_webhook.go PodChaosSpec.Validate: container-kill needs containerNames."""
    if spec.get("action") == "container-kill" and not spec.get("containerNames"):
        detail = "invalid value: the name of container is required on container-kill action"
        return [_invalid("spec.containerNames", "", detail)]
    return []


def _http(spec: dict[str, Any]) -> list[str]:
    errors = []
    if int(spec.get("port") or 0) <= 0:
        errors.append(_invalid("spec.port", spec.get("port", 0), f"port {spec.get('port', 0)} is not supported"))
    method = spec.get("method")
    if method is not None and spec.get("target") == "Request" and method not in _METHODS:
        errors.append(_invalid("spec.method", method, f"method {method} is not supported"))
    if spec.get("target") not in ("Request", "Response"):
        errors.append(_invalid("spec.target", spec.get("target"), f"target {spec.get('target')} is not supported"))
    if "delay" in spec:
        errors += _duration("spec.delay", spec["delay"], allow_empty=False)
    return errors


def _io(spec: dict[str, Any]) -> list[str]:
    errors = []
    percent = spec.get("percent")
    if isinstance(percent, int) and not 0 <= percent <= 100:
        errors.append(_invalid("spec.percent", percent, "percent field should be in 0-100"))
    if spec.get("action") == "fault" and not spec.get("errno"):
        errors.append(_invalid("spec.errno", 0, "action fault: errno 0 is not supported"))
    return errors + _duration("spec.delay", spec.get("delay"))


def chaos_problems(body: dict[str, Any]) -> list[str]:
    """What the kind's validating webhook refuses in `body`, as field errors; empty when admitted."""
    spec = body.get("spec") or {}
    errors = _selector("spec", spec)
    if isinstance(spec.get("target"), dict) and body.get("kind") == "NetworkChaos":
        errors += _selector("spec.target", spec["target"])
    errors += _duration("spec.duration", spec.get("duration"))
    kinds = {"NetworkChaos": _network, "StressChaos": _stress, "HTTPChaos": _http, "IOChaos": _io,
             "TimeChaos": _time, "PodChaos": _pod}  # fmt: skip
    errors += kinds.get(str(body.get("kind")), lambda _: [])(spec)
    return errors
