"""The project's JSON Lines traffic format, one request a line:

    {"id": "r1", "timestamp": 1764680000.125, "method": "POST", "path": "/v1/chat/completions",
     "headers": {"content-type": "application/json"}, "body": {"model": "m", "messages": [...]}}

`timestamp` is epoch seconds (number) or RFC 3339 text; `body` is a JSON value (sent as JSON), a string
(sent as is), or absent; `body_base64` carries binary bodies. `id` defaults to `line-N`.

A line that cannot be sent as valid HTTP (a non-finite or out-of-range timestamp, a method that is not a
token, a header name or value outside RFC 9110) is skipped with its reason; the reason names the field,
never its value (values may hold credentials). Paths are percent-encoded (kfchaos.traffic.httpsyntax).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from kfchaos.bounds import MAX_TIMESTAMP, finite_timestamp, json_depth_ok
from kfchaos.traffic.httpsyntax import encode_path, header_problem
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, iter_lines

_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


def parse_timestamp(value: Any) -> float:
    """Epoch seconds from a number or RFC 3339 text; ValueError (naming no value) when not finite or outside
    0 .. year 9999."""
    if isinstance(value, bool):
        raise ValueError("timestamp must be a number or RFC 3339 text, not a boolean")
    if isinstance(value, int) and not -MAX_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise ValueError("timestamp is out of range (epoch seconds up to year 9999)")  # float() would overflow
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        if len(value) > 64:
            raise ValueError("timestamp text is too long for RFC 3339")
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("timestamp is not RFC 3339 text") from None
        if moment.tzinfo is None:
            raise ValueError("timestamp has no time zone")
        seconds = moment.timestamp()
    else:
        raise ValueError("timestamp must be a number or RFC 3339 text")
    if not finite_timestamp(seconds):
        raise ValueError("timestamp must be finite epoch seconds from 0 to year 9999")
    return seconds


def parse_record(data: Any, line: int) -> TrafficRequest:
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    if "timestamp" not in data:
        raise ValueError("missing field timestamp")
    try:
        timestamp = parse_timestamp(data["timestamp"])
    except ValueError as exc:
        raise ValueError(f"field timestamp: {exc}") from None
    method = data.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in _METHODS:
        raise ValueError(f"field method: not one of {', '.join(sorted(_METHODS))}")
    method = method.upper()
    path = data.get("path", "/")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError("field path: must be text starting with /")
    headers = data.get("headers")
    header_items: tuple[tuple[str, str], ...] = ()
    if headers:  # the common small request has none: skip the checks
        if not isinstance(headers, dict):
            raise ValueError("field headers must be an object of strings")
        for name, value in headers.items():
            problem = header_problem(name, value)
            if problem:
                raise ValueError(f"field headers: {problem}")
        header_items = tuple(headers.items())
    elif headers is not None and headers != {}:
        raise ValueError("field headers must be an object of strings")
    body: bytes
    if "body_base64" in data:
        try:
            body = base64.b64decode(data["body_base64"], validate=True)
        except (binascii.Error, TypeError):
            raise ValueError("field body_base64 is not base64") from None
    elif "body" not in data or data["body"] is None:
        body = b""
    elif isinstance(data["body"], str):
        body = data["body"].encode("utf-8", "surrogatepass")
    else:
        body = json.dumps(data["body"], separators=(",", ":")).encode()
    request_id = data.get("id")
    return TrafficRequest(
        id=request_id if type(request_id) is str else f"line-{line}" if request_id is None else str(request_id),
        timestamp=timestamp,
        method=method,
        path=encode_path(path),
        headers=header_items,
        body=body,
    )


def read_jsonl(path: str | Path, report: SourceReport) -> Iterator[TrafficRequest]:
    for line, raw in iter_lines(path, report):
        if not raw.strip():
            continue
        if not json_depth_ok(raw):
            report.skip(line, "JSON nested too deep")
            continue
        try:
            request = parse_record(json.loads(raw), line)
        except json.JSONDecodeError as exc:
            report.skip(line, f"invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        except UnicodeDecodeError:
            report.skip(line, "not UTF-8 text")
            continue
        except (ValueError, RecursionError) as exc:
            report.skip(line, str(exc) if isinstance(exc, ValueError) else "JSON nested too deep")
            continue
        report.records += 1
        yield request
