"""Direct scrape of a `/metrics` endpoint (Prometheus text format) for the embedded mode, where no Prometheus
server runs. Parsing is prometheus_client's; each `scrape()` adds one timestamped point per series, and the
`MetricsSource` queries read that history. Queries are plain selectors, `name` or `name{label="value",...}`:
this is not a PromQL engine.
"""

from __future__ import annotations

import re
import time
import urllib.error

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from kfchaos import netsafe
from kfchaos.metrics.prometheus import PrometheusUnreachable, PromQLError
from kfchaos.metrics.source import RangeSeries, Sample

_SELECTOR = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s*$")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')

Key = tuple[str, tuple[tuple[str, str], ...]]
# A vLLM /metrics page is tens of kilobytes (a few hundred series); a page past this is not one to keep.
MAX_PAGE_BYTES = 16 << 20


def parse_selector(query: str) -> tuple[str, dict[str, str]]:
    match = _SELECTOR.match(query)
    if not match:
        raise PromQLError(f'direct scrape supports only name or name{{label="value"}} selectors, not {query!r}')
    name, body = match.group(1), match.group(2) or ""
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(body.strip()):
        item = _MATCHER.match(body, pos)
        if not item:
            raise PromQLError(f'cannot read label matchers in {query!r} (only label="value" is supported)')
        labels[item.group(1)] = item.group(2)
        pos = item.end()
    return name, labels


class ScrapeSource:
    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._history: dict[Key, list[tuple[float, float]]] = {}

    def scrape(self, at: float | None = None) -> int:
        """Fetch and parse the endpoint once; returns the number of samples read."""
        try:
            # the timeout bounds the whole scrape (connect and every read), not each read
            answer = netsafe.fetch(self.url, self.timeout, MAX_PAGE_BYTES)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PrometheusUnreachable(f"metrics endpoint {self.url} unreachable: {reason}") from None
        if len(answer.body) > MAX_PAGE_BYTES:
            raise PrometheusUnreachable(f"metrics endpoint {self.url}: page larger than {MAX_PAGE_BYTES >> 20} MiB")
        text = answer.body.decode("utf-8", errors="replace")
        now = time.time() if at is None else at
        count = 0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                self._history.setdefault(key, []).append((now, float(sample.value)))
                count += 1
        return count

    def _matching(self, query: str) -> list[Key]:
        name, wanted = parse_selector(query)
        return [
            key for key in self._history if key[0] == name and all(dict(key[1]).get(k) == v for k, v in wanted.items())
        ]

    def instant(self, query: str, at: float | None = None) -> list[Sample]:
        out = []
        for key in self._matching(query):
            points = [p for p in self._history[key] if at is None or p[0] <= at]
            if points:
                out.append(Sample(dict(key[1]), points[-1][0], points[-1][1]))
        return out

    def range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """The scraped points within [start, end] (as scraped: `step` is the scrape cadence, not resampled)."""
        out = []
        for key in self._matching(query):
            points = [p for p in self._history[key] if start <= p[0] <= end]
            if points:
                times = np.array([p[0] for p in points], dtype=np.float64)
                values = np.array([p[1] for p in points], dtype=np.float64)
                out.append(RangeSeries(dict(key[1]), times, values))
        return out
