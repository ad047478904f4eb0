"""Prometheus HTTP API client: instant and range queries with timeouts, retries with backoff, clear errors.

Transport is urllib3 (already a dependency of the kubernetes client), whose Retry does exponential backoff
on connection errors and on 502/503/504. A 400/422 answer is never retried: it is a bad query, reported with
Prometheus's own message.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import urllib3
from urllib3.exceptions import HTTPError as Urllib3Error

from kfchaos import netsafe
from kfchaos.errors import KfchaosError, SpecError
from kfchaos.metrics.source import RangeSeries, Sample
from kfchaos.units import parse_duration
from kfchaos.yamlsource import load_yaml

MAX_POINTS = 11_000  # Prometheus refuses range queries of more than 11,000 points per series
# The most of one answer held in memory (a 7-day range of a few hundred series at a 5-minute step is ~10 MiB).
MAX_ANSWER_BYTES = 256 << 20
# A Prometheus configuration with thousands of scrape jobs is a few megabytes.
MAX_CONFIG_BYTES = 16 << 20


class PrometheusError(KfchaosError):
    """Prometheus answered with an error that is not the query's fault (5xx, malformed answer)."""


class PromQLError(PrometheusError):
    """Prometheus rejected the query (bad_data): the message is Prometheus's, with the query."""


class PrometheusUnreachable(PrometheusError):
    """No answer after the retries: connection refused, DNS, timeout."""


def _value(raw: str) -> float:
    if not isinstance(raw, str):  # the API sends sample values as strings; anything else is not Prometheus
        raise TypeError("sample value is not a string")
    return float(raw)  # Prometheus sends "NaN", "+Inf", "-Inf" as strings, which float() reads


def _labels(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise TypeError("metric labels are not an object of strings")
    return raw


@contextlib.contextmanager
def _malformed(url: str, query: str) -> Iterator[None]:
    """A server under chaos (or a proxy in front of it) may answer anything: a shape that is not the Prometheus
    API's is a PrometheusError naming the query (the metric is then missing: INCONCLUSIVE), never a traceback."""
    try:
        yield
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise PrometheusError(f"Prometheus at {url}: malformed answer to {query!r} ({type(exc).__name__})") from None


class PrometheusClient:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        retry = netsafe.retry(  # a redirect to another origin is refused: the headers may carry a credential
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            backoff_factor=backoff,
            status_forcelist=(502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,
        )
        self._pool = netsafe.watch_pools(
            urllib3.PoolManager(retries=retry, timeout=urllib3.Timeout(total=timeout), headers=headers), timeout
        )

    def _call(self, path: str, fields: dict[str, str]) -> Any:
        url = f"{self.url}{path}"
        # `timeout` bounds the whole call -- connect, retries, headers and every read of the body -- not each read
        # (a server dripping a byte a second would otherwise hold the call for as long as it drips).
        with netsafe.Deadline(self.timeout) as deadline:
            try:
                # POST form: long PromQL (many pods in a regex) would overflow a GET URL. Status endpoints are GET.
                if fields:
                    response = self._pool.request(
                        "POST", url, fields=fields, encode_multipart=False, preload_content=False
                    )
                else:
                    response = self._pool.request("GET", url, preload_content=False)
                # Bounded in memory whatever the server sends: read one byte past the cap to know it was exceeded.
                data = response.read(MAX_ANSWER_BYTES + 1)
                response.release_conn()
            except (Urllib3Error, OSError) as exc:
                if deadline.expired:
                    raise PrometheusUnreachable(
                        f"Prometheus at {self.url}: no whole answer within {self.timeout:g}s (whole-call deadline)"
                    ) from None
                reason = getattr(exc, "reason", None) or exc
                raise PrometheusUnreachable(f"Prometheus at {self.url} unreachable: {reason}") from None
            if deadline.expired:  # a body cut by the deadline can look whole
                raise PrometheusUnreachable(
                    f"Prometheus at {self.url}: no whole answer within {self.timeout:g}s (whole-call deadline)"
                )
        query = fields.get("query", "")
        if len(data) > MAX_ANSWER_BYTES:
            raise PrometheusError(
                f"Prometheus at {self.url}: answer to {query!r} is larger than {MAX_ANSWER_BYTES >> 20} MiB; "
                "narrow the window or raise the step"
            )
        try:
            body = json.loads(data or b"{}")
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, an integer too long
            body = {}
        if not isinstance(body, dict):
            body = {}
        if response.status in (400, 422) or body.get("errorType") == "bad_data":
            message = body.get("error") or data[:200].decode(errors="replace")
            raise PromQLError(f"Prometheus at {self.url} rejected query {query!r}: {netsafe.printable(message)[:500]}")
        if response.status != 200 or body.get("status") != "success":
            message = body.get("error") or f"HTTP {response.status}"
            raise PrometheusError(f"Prometheus at {self.url} failed on {query!r}: {netsafe.printable(message)[:500]}")
        if not isinstance(body.get("data"), dict):
            raise PrometheusError(f"Prometheus at {self.url}: malformed answer to {query!r} (no data object)")
        return body["data"]

    def instant(self, query: str, at: float | None = None) -> list[Sample]:
        fields = {"query": query}
        if at is not None:
            fields["time"] = repr(float(at))
        data = self._call("/api/v1/query", fields)
        with _malformed(self.url, query):
            kind, result = data["resultType"], data["result"]
            if kind == "scalar":
                return [Sample({}, float(result[0]), _value(result[1]))]
            if kind != "vector":
                raise PrometheusError(f"query {query!r} returned a {kind}, expected an instant vector")
            return [
                Sample(_labels(item["metric"]), float(item["value"][0]), _value(item["value"][1])) for item in result
            ]

    def range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        if step <= 0 or end < start:
            raise ValueError(f"range query needs step > 0 and end >= start (got {start}..{end} step {step})")
        points = math.floor((end - start) / step) + 1
        if points > MAX_POINTS:
            raise ValueError(f"{points} points per series is more than Prometheus allows ({MAX_POINTS}); raise step")
        fields = {"query": query, "start": repr(float(start)), "end": repr(float(end)), "step": repr(float(step))}
        data = self._call("/api/v1/query_range", fields)
        out = []
        with _malformed(self.url, query):
            if data["resultType"] != "matrix":
                raise PrometheusError(f"range query {query!r} returned a {data['resultType']}, expected a matrix")
            for item in data["result"]:
                times = np.array([float(t) for t, _ in item["values"]], dtype=np.float64)
                values = np.array([_value(v) for _, v in item["values"]], dtype=np.float64)
                out.append(RangeSeries(_labels(item["metric"]), times, values))
        return out

    def scrape_interval(self) -> float | None:
        """The longest scrape interval in the server's configuration (seconds), or None when unreadable:
        the grace an event count needs, since a kill shows in the series up to one interval late."""
        try:
            data = self._call("/api/v1/status/config", {})
            # The bounded loader of experiment files: an alias bomb in the answer stops at MAX_NODES, not at 5 GB.
            text = data.get("yaml", "")
            where = f"{self.url}/api/v1/status/config"
            config = load_yaml(text, where, max_bytes=MAX_CONFIG_BYTES).data if text.strip() else {}
            default = (config.get("global") or {}).get("scrape_interval", "1m")
            jobs = config.get("scrape_configs") or []
            intervals = [default] + [job.get("scrape_interval", default) for job in jobs]
            return max(parse_duration(str(i)) for i in intervals)
        except (PrometheusError, SpecError, AttributeError, TypeError, ValueError):
            return None  # unreadable, or not the shape of a Prometheus configuration

    def range_chunked(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """A range query split into pieces under the 11,000-point limit, joined per label set."""
        span = step * (MAX_POINTS - 1)
        pieces: dict[tuple[tuple[str, str], ...], list[RangeSeries]] = {}
        low = start
        while low <= end:
            high = min(end, low + span)
            for series in self.range(query, low, high, step):
                pieces.setdefault(tuple(sorted(series.labels.items())), []).append(series)
            low = high + step
        return [
            RangeSeries(dict(key), np.concatenate([p.times for p in parts]), np.concatenate([p.values for p in parts]))
            for key, parts in pieces.items()
        ]
