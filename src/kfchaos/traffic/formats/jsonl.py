"""The project's JSON Lines traffic format, one request a line:

    {"id": "r1", "timestamp": 1764680000.125, "method": "POST", "path": "/v1/chat/completions",
     "headers": {"content-type": "application/json"}, "body": {"model": "m", "messages": [...]}}

`timestamp` is epoch seconds (number) or RFC 3339 text; `body` is a JSON value (sent as JSON), a string
(sent as is), or absent; `body_base64` carries binary bodies. `id` defaults to `line-N`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, iter_lines

_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


def parse_timestamp(value: Any) -> float:
    if type(value) is float:
        return value
    if isinstance(value, bool):
        raise ValueError("timestamp must be a number or RFC 3339 text, not a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not RFC 3339") from None
        if moment.tzinfo is None:
            raise ValueError(f"timestamp {value!r} has no time zone")
        return moment.timestamp()
    raise ValueError("timestamp must be a number or RFC 3339 text")


def parse_record(data: Any, line: int) -> TrafficRequest:
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    if "timestamp" not in data:
        raise ValueError("missing field timestamp")
    timestamp = parse_timestamp(data["timestamp"])
    method = data.get("method", "GET")
    if method not in _METHODS:
        if not isinstance(method, str) or method.upper() not in _METHODS:
            raise ValueError(f"field method: {method!r} is not an HTTP method")
        method = method.upper()
    path = data.get("path", "/")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"field path: {path!r} must start with /")
    headers = data.get("headers")
    header_items: tuple[tuple[str, str], ...] = ()
    if headers:  # the common small request has none: skip the checks
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise ValueError("field headers must be an object of strings")
        header_items = tuple((str(k), v) for k, v in headers.items())
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
        body = data["body"].encode()
    else:
        body = json.dumps(data["body"], separators=(",", ":")).encode()
    request_id = data.get("id")
    return TrafficRequest(
        id=request_id if type(request_id) is str else f"line-{line}" if request_id is None else str(request_id),
        timestamp=timestamp,
        method=method,
        path=path,
        headers=header_items,
        body=body,
    )


def read_jsonl(path: str | Path, report: SourceReport) -> Iterator[TrafficRequest]:
    for line, raw in iter_lines(path, report):
        if not raw.strip():
            continue
        try:
            request = parse_record(json.loads(raw), line)
        except json.JSONDecodeError as exc:
            report.skip(line, f"invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        except (ValueError, UnicodeDecodeError) as exc:
            report.skip(line, str(exc))
            continue
        report.records += 1
        yield request
