"""GoReplay `.gor` files: records separated by a line holding the monkeys `🐵🙈🙉`.

Each record starts with a meta line `TYPE ID TIMESTAMP_NS [LATENCY]` (type 1 = request, 2 = original
response, 3 = replayed response) followed by the raw HTTP/1.x payload. Only requests are replayed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kfchaos.bounds import MAX_TIMESTAMP
from kfchaos.traffic.httpsyntax import encode_path, header_problem, is_token
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, iter_lines

SEPARATOR = "🐵🙈🙉".encode()
_SKIP_HEADERS = {b"content-length", b"transfer-encoding", b"host", b"connection"}


def read_gor(path: str | Path, report: SourceReport) -> Iterator[TrafficRequest]:
    record: list[bytes] = []
    start = 1
    for line, raw in iter_lines(path, report, keep_ends=True):
        if raw.rstrip(b"\r\n") == SEPARATOR:
            request = _record(record, start, report)
            if request is not None:
                yield request
            record = []
            start = line + 1
        else:
            record.append(raw)
    if record and any(part.strip() for part in record):
        request = _record(record, start, report)
        if request is not None:
            yield request


def _record(lines: list[bytes], start: int, report: SourceReport) -> TrafficRequest | None:
    if not lines:
        report.skip(start, "empty GoReplay record")
        return None
    meta = lines[0].split()
    if len(meta) < 3 or not meta[2].isdigit():
        report.skip(start, "GoReplay meta line must be 'TYPE ID TIMESTAMP_NS [LATENCY]'")
        return None
    if len(meta[2]) > 21 or int(meta[2]) / 1e9 > MAX_TIMESTAMP:  # 21 digits: past year 9999 in ns anyway
        report.skip(start, "GoReplay timestamp is out of range (epoch nanoseconds up to year 9999)")
        return None
    if meta[0] != b"1":
        return None  # responses (2, 3) are not replayed; skipping them is not an error
    payload = b"".join(lines[1:])
    if payload.endswith(b"\n"):
        payload = payload[:-1]  # the newline before the separator belongs to the framing
    head, sep, body = payload.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = payload.partition(b"\n\n")
    head_lines = head.replace(b"\r\n", b"\n").split(b"\n")
    request_line = head_lines[0].split()
    if len(request_line) != 3 or not request_line[2].startswith(b"HTTP/") or not request_line[1].startswith(b"/"):
        report.skip(start + 1, "GoReplay payload does not start with an HTTP request line")
        return None
    method = request_line[0].decode("latin-1")
    if not is_token(method):
        report.skip(start + 1, "GoReplay request method is not an HTTP token")
        return None
    headers: list[tuple[str, str]] = []
    for header in head_lines[1:]:
        name, colon, value = header.partition(b":")
        if not colon:
            report.skip(start + 1, "malformed header line (no colon)")
            return None
        text_name, text_value = name.decode("latin-1"), value.strip(b" \t").decode("latin-1")
        problem = header_problem(text_name, text_value)  # "Name :" is a framing attack (RFC 9112 5.1): refused
        if problem:
            report.skip(start + 1, problem)
            return None
        if text_name.lower().encode() not in _SKIP_HEADERS:
            headers.append((text_name, text_value))
    report.records += 1
    return TrafficRequest(
        id=meta[1].decode("latin-1"),
        timestamp=int(meta[2]) / 1e9,
        method=method,
        path=encode_path(request_line[1]),
        headers=tuple(headers),
        body=body,
    )
