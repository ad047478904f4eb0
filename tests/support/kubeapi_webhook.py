"""The loopback API server's model of Chaos Mesh's validating webhooks (v<kind>.kb.io), written from the Go
source and kept apart from kfchaos' own rules (kfchaos.faults.admission), so a test of one against the
other can fail. chaos-mesh/chaos-mesh master (v2.7 line):

- api/v1alpha1/common_webhook.go: PodSelector.Validate (mode values through strconv.Atoi), Percent (0-100),
  FloatStr (strconv.ParseFloat), Duration (time.ParseDuration).
- api/v1alpha1/networkchaos_webhook.go: NetworkChaosSpec.Validate (direction vs target/externalTargets,
  partition exempt), Rate (isValidRateUnit: unsigned integer + unit).
- api/v1alpha1/stresschaos_webhook.go: Bytes (N% with Atoi in [0, 100], else docker/go-units FromHumanSize),
  Stressor workers > 0.
- api/v1alpha1/httpchaos_webhook.go: Port > 0, HTTPMethod (net/http constants, target Request only).
- api/v1alpha1/iochaos_webhook.go: IOErrno != 0 for action fault.

Messages are shaped like k8s.io/apimachinery field.Error: `PATH: Invalid value: "V": DETAIL`.
"""

from __future__ import annotations

import re
from typing import Any

_ATOI = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(inf|infinity|nan)$", re.IGNORECASE)
_HUMAN_SIZE = re.compile(r"^(\d+(\.\d+)*) ?([kKmMgGtTpP])?[iI]?[bB]?$")  # docker/go-units size.go sizeRegex
_RATE_UNITS = ("kbit", "mbit", "gbit", "tbit", "tbps", "gbps", "mbps", "kbps", "bps", "bit")
_METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT"}
_NETEM = ("delay", "loss", "duplicate", "corrupt", "reorder")


def _invalid(path: str, value: Any, detail: str) -> str:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def _atoi_error(value: str) -> str | None:
    if _ATOI.match(value):
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
            if re.fullmatch(r"\d+", number):
                return []
            return [
                _invalid(path, rate, f'parse rate field error:strconv.ParseUint: parsing "{number}": invalid syntax')
            ]
    return [_invalid(path, rate, "parse rate field error:invalid unit")]


def _network(spec: dict[str, Any]) -> list[str]:
    errors = []
    for action in _NETEM:
        block = spec.get(action)
        if isinstance(block, dict):
            for key in (action if action != "delay" else "latency", "correlation"):
                if key in block and key != "latency" and not _FLOAT.match(str(block[key])):
                    errors.append(_invalid(f"spec.{action}.{key}", block[key], "parse correlation field error"))
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
    errors = []
    stressors = spec.get("stressors") or {}
    for name, stressor in stressors.items():
        if isinstance(stressor, dict) and int(stressor.get("workers") or 0) <= 0:
            errors.append(_invalid(f"spec.stressors.{name}", "", "workers should always be positive"))
    memory = stressors.get("memory") or {}
    size = str(memory.get("size") or "")
    if size.endswith("%"):
        parse = _atoi_error(size[:-1])
        if parse:
            errors.append(_invalid("spec.stressors.memory.size", size, f"incorrect bytes format: {parse}"))
        elif not 0 <= int(size[:-1]) <= 100:
            errors.append(_invalid("spec.stressors.memory.size", size, "incorrect bytes format: illegal proportion"))
    elif size and not _HUMAN_SIZE.match(size):
        errors.append(_invalid("spec.stressors.memory.size", size, f"incorrect bytes format: invalid size: '{size}'"))
    return errors


def _http(spec: dict[str, Any]) -> list[str]:
    errors = []
    if int(spec.get("port") or 0) <= 0:
        errors.append(_invalid("spec.port", spec.get("port", 0), f"port {spec.get('port', 0)} is not supported"))
    method = spec.get("method")
    if method is not None and spec.get("target") == "Request" and method not in _METHODS:
        errors.append(_invalid("spec.method", method, f"method {method} is not supported"))
    return errors


def _io(spec: dict[str, Any]) -> list[str]:
    errors = []
    percent = spec.get("percent")
    if isinstance(percent, int) and not 0 <= percent <= 100:
        errors.append(_invalid("spec.percent", percent, "percent field should be in 0-100"))
    if spec.get("action") == "fault" and not spec.get("errno"):
        errors.append(_invalid("spec.errno", 0, "action fault: errno 0 is not supported"))
    return errors


def chaos_problems(body: dict[str, Any]) -> list[str]:
    """What the kind's validating webhook refuses in `body`, as field errors; empty when admitted."""
    spec = body.get("spec") or {}
    errors = _selector("spec", spec)
    if isinstance(spec.get("target"), dict):
        errors += _selector("spec.target", spec["target"])
    errors += {"NetworkChaos": _network, "StressChaos": _stress, "HTTPChaos": _http, "IOChaos": _io}.get(
        str(body.get("kind")), lambda _: []
    )(spec)
    return errors
