"""nginx access logs in the `combined` format:

    127.0.0.1 - - [02/Dec/2026:10:00:00 +0000] "GET /healthz HTTP/1.1" 200 12 "-" "curl/8"

Extra fields appended after the user agent are allowed; if the last one is `$msec` (epoch seconds with
milliseconds, e.g. 1764669600.123) it is used as the timestamp, since `$time_local` has only 1 s
resolution. Access logs carry no request bodies, so POST bodies are empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from kfchaos.bounds import finite_timestamp
from kfchaos.traffic.httpsyntax import encode_path
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport, iter_lines

_COMBINED = re.compile(
    r'^(?P<addr>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" '
    r'(?P<status>\d{3}) \S+ "[^"]*" "[^"]*"(?P<rest>.*)$'
)
_MSEC = re.compile(r"(\d{9,11}\.\d{1,6})\s*$")


def read_nginx(path: str | Path, report: SourceReport) -> Iterator[TrafficRequest]:
    for line, raw in iter_lines(path, report):
        if not raw.strip():
            continue
        text = raw.decode("utf-8", "replace")
        match = _COMBINED.match(text)
        if not match:
            report.skip(line, "not an nginx combined log line")
            continue
        msec = _MSEC.search(match["rest"])
        if msec:
            timestamp = float(msec.group(1))
        else:
            try:
                timestamp = datetime.strptime(match["time"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
            except ValueError:
                report.skip(line, "time is not dd/Mon/yyyy:HH:MM:SS +zone")
                continue
        if not finite_timestamp(timestamp):
            report.skip(line, "time is before 1970")
            continue
        if not match["path"].startswith("/"):
            report.skip(line, "request target is not a path")
            continue
        report.records += 1
        yield TrafficRequest(
            id=f"line-{line}", timestamp=timestamp, method=match["method"], path=encode_path(match["path"])
        )
