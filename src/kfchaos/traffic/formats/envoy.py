"""Envoy access logs: the default text format, or JSON lines (`json_format`).

Default format (Envoy docs, "Default format string"):

    [2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28"
    "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"

The `x-request-id` field becomes the request id. JSON lines need `start_time`, `method` and `path`
(or `:path`); `x-request-id`/`request_id` is used when present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from kfchaos.bounds import json_depth_ok
from kfchaos.traffic.formats.jsonl import parse_timestamp
from kfchaos.traffic.httpsyntax import encode_path, is_token
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, iter_lines

_DEFAULT = re.compile(
    r'^\[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<path>\S+) (?P<proto>[^"]+)" (?P<status>\d{3}|-) '
    r'\S+ \S+ \S+ \S+ \S+ "[^"]*" "[^"]*" "(?P<id>[^"]*)"'
)


def read_envoy(path: str | Path, report: SourceReport) -> Iterator[TrafficRequest]:
    for line, raw in iter_lines(path, report):
        if not raw.strip():
            continue
        text = raw.decode("utf-8", "replace")
        try:
            request = _from_json(text, line) if text.lstrip().startswith("{") else _from_text(text, line)
        except ValueError as exc:  # messages name the field, never its value
            report.skip(line, str(exc))
            continue
        report.records += 1
        yield request


def _from_text(text: str, line: int) -> TrafficRequest:
    match = _DEFAULT.match(text)
    if not match:
        raise ValueError("not an Envoy default-format access log line")
    if not match["path"].startswith("/"):
        raise ValueError("request path does not start with /")
    request_id = match["id"] if match["id"] not in ("", "-") else f"line-{line}"
    try:
        timestamp = parse_timestamp(match["time"])
    except ValueError as exc:
        raise ValueError(f"start time: {exc}") from None
    return TrafficRequest(id=request_id, timestamp=timestamp, method=match["method"], path=encode_path(match["path"]))


def _from_json(text: str, line: int) -> TrafficRequest:
    if not json_depth_ok(text):
        raise ValueError("JSON nested too deep")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError("JSON nested too deep") from None
    if not isinstance(data, dict):
        raise ValueError("line is not a JSON object")
    missing = [k for k in ("start_time", "method") if k not in data]
    path = data.get("path", data.get(":path"))
    if path is None:
        missing.append("path")
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError("field path: must be text starting with /")
    method = data["method"]
    if not isinstance(method, str) or not is_token(method):
        raise ValueError("field method: not an HTTP method token")
    try:
        timestamp = parse_timestamp(data["start_time"])
    except ValueError as exc:
        raise ValueError(f"field start_time: {exc}") from None
    request_id = data.get("x-request-id") or data.get("request_id") or f"line-{line}"
    return TrafficRequest(id=str(request_id), timestamp=timestamp, method=method, path=encode_path(path))
