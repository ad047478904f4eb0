"""A Prometheus answer is read into memory only up to a bound, whatever the server sends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kfchaos.metrics import prometheus
from kfchaos.metrics.prometheus import PrometheusClient, PrometheusError

SENT = 3 << 20  # bytes the hostile server sends


class _Endless(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # unread request bytes would reset
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(SENT))
        self.end_headers()
        chunk = b" " * 65536
        for _ in range(SENT // len(chunk)):
            try:
                self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endless() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_over_the_bound_is_an_error_not_a_memory_blowup(
    endless: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 1 << 20)
    with pytest.raises(PrometheusError, match="larger than 1 MiB"):
        PrometheusClient(endless).instant("up")


def test_an_answer_under_the_bound_is_read(endless: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 4 << 20)
    with pytest.raises(PrometheusError, match=r"failed on .up.: HTTP 200"):  # all blanks: read whole, then judged
        PrometheusClient(endless).instant("up")
