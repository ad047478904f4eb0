"""Two loopback HTTP servers for the credential-redirect tests: `first` answers every request with a 307 to the
same path on `second` (another port, so another origin); `second` records every request it sees and answers
what a real server would (a KFP healthz, an empty Prometheus vector, an empty pod list)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "planted-secret-7f3a"
CREDENTIAL_HEADERS = ("authorization", "cookie", "x-api-key", "proxy-authorization")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Pair:
    first: str
    second: str
    seen_first: list[Seen] = field(default_factory=list)
    seen_second: list[Seen] = field(default_factory=list)

    def leaked(self) -> list[Seen]:
        """Requests the second server saw carrying the planted token in any header."""
        return [s for s in self.seen_second if any(TOKEN in v for v in s.headers.values())]


def _answer(path: str) -> dict[str, object]:
    if "healthz" in path:
        return {"tag_name": "2.15.0", "multi_user": False, "commit_sha": "x"}
    if path.startswith("/api/v1/query"):
        return {"status": "success", "data": {"resultType": "vector", "result": []}}
    if path.startswith("/api/v1/status/config"):
        return {"status": "success", "data": {"yaml": "global:\n  scrape_interval: 5s\n"}}
    if "/pods" in path:
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
    if "experiments" in path:
        return {"experiments": [], "total_size": 0}
    return {}


def _handler(pair: Pair, redirect: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
            (pair.seen_first if redirect else pair.seen_second).append(seen)
            if redirect or self.path == "/hop":  # /hop on the second: a redirect within its own origin
                self.send_response(307)
                self.send_header("Location", pair.second + self.path if redirect else "/healthz")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps(_answer(self.path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

    return Handler


@contextmanager
def redirect_pair() -> Iterator[Pair]:
    pair = Pair("", "")
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _handler(pair, redirect)) for redirect in (True, False)]
    for server in servers:
        server.daemon_threads = True
    pair.first, pair.second = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield pair
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=5)
