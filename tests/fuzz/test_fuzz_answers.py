"""Fuzz the Prometheus answer parser (the server answers outside the traffic package) over a real loopback
socket: JSON bodies of the API's shape with values replaced by hostile ones, raw bytes, odd statuses. Each
query ends in samples or a PrometheusError (the metric is then missing: INCONCLUSIVE), within the harness'
bounds -- never a traceback."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfchaos.metrics.prometheus import PrometheusClient, PrometheusError
from tests.fuzz.harness import bounded, budget, warm
from tests.fuzz.test_fuzz_json import RAW, mutated

VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"pod": "a"}, "value": [1700000000.0, "3"]}]},
}
MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [{"metric": {"pod": "a"}, "values": [[1700000000.0, "1"], [1700000015.0, "NaN"]]}],
    },
}


class _Answer:
    status = 200
    body = b"{}"


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(_Answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(_Answer.body)))
        self.end_headers()
        self.wfile.write(_Answer.body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _ask(url: str, kind: str) -> str:
    client = PrometheusClient(url, timeout=5, retries=0)
    try:
        if kind == "instant":
            client.instant("up")
        elif kind == "range":
            client.range("up", 1700000000.0, 1700000060.0, 15.0)
        else:
            client.scrape_interval()
    except PrometheusError as exc:
        return f"error: {exc}"
    return "ok"


@settings(max_examples=budget(30))
@given(
    body=st.one_of(mutated(VECTOR), mutated(MATRIX), RAW),
    status=st.sampled_from([200, 200, 200, 400, 422, 500, 204]),
    kind=st.sampled_from(["instant", "range", "config"]),
)
def test_any_answer_ends_in_samples_or_a_prometheus_error(prometheus: str, body: bytes, status: int, kind: str) -> None:
    warm()
    _Answer.status, _Answer.body = status, body
    outcome = bounded(lambda: _ask(prometheus, kind))
    assert outcome.broke is None and outcome.error is None, (body[:300], status, kind, outcome)


def test_the_seeds_parse(prometheus: str) -> None:
    _Answer.status = 200
    for seed, kind in ((VECTOR, "instant"), (MATRIX, "range")):
        _Answer.body = json.dumps(copy.deepcopy(seed)).encode()
        assert _ask(prometheus, kind) == "ok"
