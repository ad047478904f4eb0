"""The client's retries and error handling against a loopback HTTP server that misbehaves on purpose."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kfchaos.metrics.prometheus import PrometheusClient, PrometheusError, PromQLError

OK = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"a": "1"}, "value": [10, "0.5"]}]}}


class Flaky:
    """Answers 503 for the first `failures` requests, then `final` (status, body)."""

    def __init__(self) -> None:
        self.failures = 0
        self.final: tuple[int, dict[str, object]] = (200, OK)
        self.hits = 0
        self.bodies: list[str] = []


@pytest.fixture
def flaky() -> Iterator[tuple[str, Flaky]]:
    state = Flaky()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            state.hits += 1
            state.bodies.append(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
            status, body = (503, {"status": "error"}) if state.hits <= state.failures else state.final
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        thread.join(timeout=5)


def test_retries_503_with_backoff_then_succeeds(flaky: tuple[str, Flaky]) -> None:
    url, state = flaky
    state.failures = 2
    (sample,) = PrometheusClient(url, retries=3, backoff=0.01).instant("up", at=10)
    assert (sample.value, sample.labels, state.hits) == (0.5, {"a": "1"}, 3)
    assert "query=up" in state.bodies[0] and "time=10.0" in state.bodies[0]


def test_gives_up_after_the_retries(flaky: tuple[str, Flaky]) -> None:
    url, state = flaky
    state.failures = 10
    with pytest.raises(PrometheusError, match="HTTP 503"):
        PrometheusClient(url, retries=2, backoff=0.01).instant("up")
    assert state.hits == 3


def test_bad_data_is_not_retried(flaky: tuple[str, Flaky]) -> None:
    url, state = flaky
    state.final = (400, {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unexpected"})
    with pytest.raises(PromQLError, match="parse error: unexpected"):
        PrometheusClient(url, retries=3, backoff=0.01).instant("up(")
    assert state.hits == 1


def test_range_limits_are_checked_before_sending(flaky: tuple[str, Flaky]) -> None:
    url, state = flaky
    with pytest.raises(ValueError, match="11000"):
        PrometheusClient(url).range("up", 0, 7 * 86400, 1)
    assert state.hits == 0
