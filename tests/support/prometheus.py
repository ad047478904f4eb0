"""A real Prometheus server for tests: free loopback port, temporary data directory, bounded waits.

`backfill()` writes history into the data directory with `promtool tsdb create-blocks-from openmetrics`
before the server starts; `PrometheusServer` scrapes the loopback targets it is given every second.
Binaries come from Debian's `prometheus` package (scripts/ensure-prometheus.sh); missing ones skip the
test, or fail it under CI=true (tests.conftest.require_tool).
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from kfchaos.demo.stack.ports import free_port
from tests.conftest import require_tool

READY_TIMEOUT = 30.0


def backfill(data_dir: Path, openmetrics: str) -> None:
    """History (OpenMetrics text ending in `# EOF`, timestamps in seconds) as TSDB blocks in `data_dir`."""
    promtool = require_tool("promtool", "backfilling Prometheus history")
    data_dir.mkdir(parents=True, exist_ok=True)
    source = data_dir.parent / "history.om"
    source.write_text(openmetrics)
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {done.stderr.strip() or done.stdout.strip()}")


class PrometheusServer:
    def __init__(
        self,
        data_dir: Path,
        scrape_targets: list[str] | None = None,
        scrape_interval: str = "1s",
        labels: dict[str, str] | None = None,
    ) -> None:
        self.binary = require_tool("prometheus", "the integration tests query a real Prometheus")
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = data_dir.parent / "prometheus.yml"
        targets = ", ".join(f"'{t}'" for t in scrape_targets or [])
        # `labels`: what a Kubernetes service discovery would attach (namespace, pod, container), so that the
        # standard queries, scoped by namespace and pod, find the target's series.
        target_labels = "".join(f"\n          {k}: '{v}'" for k, v in (labels or {}).items())
        label_block = f"        labels:{target_labels}\n" if labels else ""
        jobs = (
            f"scrape_configs:\n  - job_name: exporter\n    static_configs:\n      - targets: [{targets}]\n{label_block}"
            if scrape_targets
            else "scrape_configs: []\n"
        )
        self.config.write_text(
            f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n{jobs}"
        )
        self.log = data_dir.parent / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrometheusServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.data_dir}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=30d",
                    "--web.enable-lifecycle",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited early:\n{self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"prometheus not ready within {READY_TIMEOUT:g}s:\n{self.log.read_text()[-2000:]}")

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None

    def wait_for(self, query: str, timeout: float = 15.0) -> None:
        """Until `query` returns a non-empty result (e.g. the first scrape landed); bounded."""
        import json
        import urllib.parse

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
            with urllib.request.urlopen(url, timeout=2) as response:
                if json.loads(response.read())["data"]["result"]:
                    return
            time.sleep(0.25)
        raise TimeoutError(f"{query!r} still empty after {timeout:g}s")


def serve_text_exporter(registry: object, port: int) -> tuple[object, object]:
    """A /metrics endpoint on loopback serving the registry in the classic text format (0.0.4).

    prometheus_client's own server would answer Prometheus's OpenMetrics Accept header with escaped names
    (`vllm:x` becomes `vllm_x`), which is not what a vLLM pod's metrics look like in Prometheus.
    """
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)  # type: ignore[arg-type]
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
