"""Traffic file formats. Each reader streams `TrafficRequest`s and records skipped lines in a `SourceReport`.

- `jsonl`: the project's own format (one JSON object a line; see docs/traffic.md), plain or gzip.
- `nginx`: nginx `combined` access logs (optionally with `$request_time` / `$msec` appended).
- `envoy`: Envoy access logs, the default text format or JSON lines.
- `gor`: GoReplay `.gor` capture files.
- `sharegpt`: a ShareGPT-like prompt set (JSON array or JSON lines); arrivals are synthesized.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from kfchaos.traffic.formats.envoy import read_envoy
from kfchaos.traffic.formats.gor import read_gor
from kfchaos.traffic.formats.jsonl import read_jsonl
from kfchaos.traffic.formats.nginx import read_nginx
from kfchaos.traffic.request import TrafficRequest
from kfchaos.traffic.source import SourceReport

Reader = Callable[[str | Path, SourceReport], Iterator[TrafficRequest]]

READERS: dict[str, Reader] = {
    "jsonl": read_jsonl,
    "nginx": read_nginx,
    "envoy": read_envoy,
    "gor": read_gor,
}
# `sharegpt` needs an arrival rate and seed, so it is opened through kfchaos.traffic.formats.sharegpt.read_sharegpt.
FORMATS = (*READERS, "sharegpt")
