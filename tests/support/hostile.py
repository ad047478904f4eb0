"""A loopback HTTP server whose every answer a test writes: a function of (method, path) returning the status,
the headers and the body, where the body may be an iterator of chunks sent with a pause between them (a server
that drips). The server stops itself: a dripping answer ends after `max_drip_s`, and `stop` closes everything."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict[str, str], bytes | Iterable[bytes]]


def json_answer(body: Any, status: int = 200) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


@dataclass
class Hostile:
    url: str
    seen: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # the request bodies, in order (a PromQL form, a JSON)
    stopping: threading.Event = field(default_factory=threading.Event)


@contextmanager
def hostile_server(
    answer: Callable[[str, str], Answer], *, drip_pause_s: float = 1.0, max_drip_s: float = 120.0
) -> Iterator[Hostile]:
    state = Hostile("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            state.bodies.append(self.rfile.read(length) if length else b"")
            state.seen.append((self.command, self.path))
            status, headers, body = answer(self.command, self.path)
            if status == 0:  # raw: the body is the whole answer, status line and headers included
                self.close_connection = True
                self._drip(body if not isinstance(body, bytes) else [body])
                return
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_header("Connection", "close")
            self.end_headers()
            self._drip(body)
            self.close_connection = True

        def _drip(self, body: Iterable[bytes]) -> None:
            began = time.monotonic()
            try:
                for chunk in body:
                    if state.stopping.is_set() or time.monotonic() - began > max_drip_s:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    state.stopping.wait(drip_pause_s)
            except OSError:  # the client gave up: what the test wants
                pass

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def drip(data: bytes) -> Iterator[bytes]:
    """One byte at a time (the server pauses between them)."""
    for i in range(len(data)):
        yield data[i : i + 1]
