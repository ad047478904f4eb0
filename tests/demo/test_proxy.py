"""The fault proxy: faults act on real loopback traffic, expire by themselves, and sweep by run id."""

from __future__ import annotations

import http.server
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest
import requests

from kfchaos.demo.stack.demostack import wait_http
from kfchaos.demo.stack.ports import free_port


class _Echo(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Echo.seen.append(self.path)
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def proxy() -> Iterator[tuple[str, str]]:
    upstream = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    listen, control = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kfchaos.demo.faults.proxy",
            "--listen",
            f"127.0.0.1:{listen}",
            "--control",
            f"127.0.0.1:{control}",
            "--upstream",
            f"http://127.0.0.1:{upstream.server_address[1]}",
            "--seed",
            "1",
        ]
    )
    control_url = f"http://127.0.0.1:{control}"
    wait_http(f"{control_url}/health")
    yield f"http://127.0.0.1:{listen}", control_url
    process.terminate()
    process.wait(timeout=10)
    upstream.shutdown()


def _put(control: str, name: str, **body: object) -> requests.Response:
    return requests.put(f"{control}/faults/{name}", json=body, timeout=5)


def _timed_get(url: str) -> tuple[float, int]:
    started = time.monotonic()
    status = requests.get(url, timeout=10).status_code
    return time.monotonic() - started, status


def test_no_fault_passes_traffic_through(proxy: tuple[str, str]) -> None:
    traffic, _ = proxy
    response = requests.get(f"{traffic}/x?y=1", timeout=5)
    assert response.status_code == 200 and response.text == "hello"
    assert "/x?y=1" in _Echo.seen


def test_network_delay_adds_its_latency_and_expires(proxy: tuple[str, str]) -> None:
    traffic, control = proxy
    baseline, _ = _timed_get(f"{traffic}/a")
    created = _put(control, "delay", type="network-delay", latency_s=0.3, duration_s=1.5, labels={"run_id": "r1"})
    assert created.status_code == 201 and created.json()["injected"]
    delayed, status = _timed_get(f"{traffic}/a")
    assert status == 200 and delayed >= baseline + 0.28
    time.sleep(1.6)
    after, _ = _timed_get(f"{traffic}/a")
    assert after < 0.25, "the fault expired by itself"
    assert requests.get(f"{control}/faults/delay", timeout=5).status_code == 404


def test_http_abort_answers_a_share_with_its_code(proxy: tuple[str, str]) -> None:
    traffic, control = proxy
    _put(control, "abort", type="http-abort", code=503, share=0.5, duration_s=30, labels={"run_id": "r2"})
    statuses = [requests.get(f"{traffic}/b", timeout=5).status_code for _ in range(200)]
    aborted = statuses.count(503)
    assert 60 < aborted < 140 and statuses.count(200) == 200 - aborted
    assert requests.get(f"{control}/faults/abort", timeout=5).json()["hits"] == aborted
    assert requests.delete(f"{control}/faults/abort", timeout=5).status_code == 200
    assert requests.get(f"{traffic}/b", timeout=5).status_code == 200


def test_network_loss_drops_connections(proxy: tuple[str, str]) -> None:
    traffic, control = proxy
    _put(control, "loss", type="network-loss", share=1.0, duration_s=30, labels={"run_id": "r3"})
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{traffic}/c", timeout=5)
    requests.delete(f"{control}/faults/loss", timeout=5)


def test_put_is_idempotent_and_sweep_removes_a_runs_faults(proxy: tuple[str, str]) -> None:
    _, control = proxy
    first = _put(control, "d1", type="http-delay", latency_s=0.01, duration_s=60, labels={"run_id": "sweep-me"})
    again = _put(control, "d1", type="http-delay", latency_s=0.5, duration_s=60, labels={"run_id": "sweep-me"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["latency_s"] == 0.01  # the existing fault, not a second one
    _put(control, "d2", type="http-delay", latency_s=0.01, duration_s=60, labels={"run_id": "sweep-me"})
    _put(control, "other", type="http-delay", latency_s=0.01, duration_s=60, labels={"run_id": "keep"})
    deleted = requests.delete(f"{control}/faults", params={"run_id": "sweep-me"}, timeout=5).json()["deleted"]
    assert sorted(deleted) == ["d1", "d2"]
    names = [f["name"] for f in requests.get(f"{control}/faults", timeout=5).json()["items"]]
    assert names == ["other"]
    requests.delete(f"{control}/faults/other", timeout=5)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "network-delay"},
        {"type": "pod-kill", "duration_s": 5},
        {"type": "http-abort", "duration_s": -1},
        {"type": "http-abort", "duration_s": 5, "share": 2},
    ],
)
def test_bad_fault_definitions_are_refused(proxy: tuple[str, str], body: dict[str, object]) -> None:
    _, control = proxy
    response = _put(control, "bad", **body)
    assert response.status_code == 422 and response.json()["error"]


def test_connect_retry_holds_requests_while_the_upstream_restarts() -> None:
    port, listen, control = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "kfchaos.demo.faults.proxy", "--listen", f"127.0.0.1:{listen}",
         "--control", f"127.0.0.1:{control}", "--upstream", f"http://127.0.0.1:{port}", "--connect-retry", "5"]
    )  # fmt: skip
    upstream: socketserver.ThreadingTCPServer | None = None
    try:
        wait_http(f"http://127.0.0.1:{control}/health")

        def start_upstream_later() -> None:
            nonlocal upstream
            time.sleep(1.0)
            upstream = socketserver.ThreadingTCPServer(("127.0.0.1", port), _Echo)
            upstream.serve_forever()

        threading.Thread(target=start_upstream_later, daemon=True).start()
        elapsed, status = _timed_get(f"http://127.0.0.1:{listen}/held")
        assert status == 200 and elapsed >= 0.9, "held until the upstream came up, not failed"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if upstream is not None:
            upstream.shutdown()
