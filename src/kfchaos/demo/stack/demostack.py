"""The embedded demo's processes: demo LLM server (under its supervisor), fault proxy, and Prometheus when
a binary is available. Started together, torn down together -- on normal exit, on an exception, on
Ctrl-C and on SIGTERM -- so no process, port or fault is left behind. On SIGKILL, which nothing can catch,
the processes die with their parent (kfchaos.demo.stack.lifetime), and the stack record (stack.json in the work
folder, whose lock the live stack holds) lets `kfchaos demo down` end whatever a platform without that left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import yaml

from kfchaos import safefile, termination
from kfchaos.demo.server.pod import DEMO_NAMESPACE, DEMO_POD
from kfchaos.demo.stack import lifetime
from kfchaos.demo.stack.enginedeploy import EngineDeployment, warm_up
from kfchaos.demo.stack.ports import free_port
from kfchaos.demo.stack.vllmengine import READY_TIMEOUT

RECORD_NAME = "stack.json"


# A port can be taken between its pick (kfchaos.demo.stack.ports) and the server's own bind: by another program's
# server, or by another stack's pick. Such a start is tried again on new ports, this many times in all.
PORT_TRIES = 3
# How a server says its port is taken: Python's OSError (errno 98, "address already in use"), Go's (Prometheus,
# "bind: address already in use").
PORT_TAKEN = "address already in use"
LOG_TAIL_BYTES = 16384
LOG_EVERY = 1.0  # seconds between two reads of a starting server's log


class PortTaken(RuntimeError):
    """A server of the stack could not bind its port: another process holds it."""


def _log_end(path: Path) -> str:
    """The last LOG_TAIL_BYTES of a server's log ("" when unreadable): a log may be long, only its end says why."""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return handle.read().decode(errors="replace")


def port_taken(log: Path) -> bool:
    """Whether the end of a server's log says its port was taken."""
    try:
        return PORT_TAKEN in _log_end(log).lower()
    except OSError:
        return False


def wait_http(
    url: str, timeout: float = 20.0, process: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    """Until `url` answers below 500; raise when `process` exits first (with the tail of its `log`) or time runs out,
    PortTaken as soon as its log says its port was taken (a supervisor would only restart it on the same port)."""
    deadline = time.monotonic() + timeout
    log_read = 0.0
    while time.monotonic() < deadline:
        if log is not None and time.monotonic() - log_read >= LOG_EVERY:  # the log, not every probe's 0.1 s
            log_read = time.monotonic()
            if port_taken(log):
                raise PortTaken(f"{url}: its port is taken; the end of {log}:\n{log_tail(log)}")
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"process {process.pid} ({url}) exited with {process.returncode} before answering"
                + (f"; the end of {log}:\n{log_tail(log)}" if log else "")
            )
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status < 500:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    tail = f"; the end of {log}:\n{log_tail(log)}" if log else ""
    raise RuntimeError(f"{url} did not answer within {timeout:g}s{tail}")


def log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return _log_end(path)[-chars:]
    except OSError as error:
        return f"(unreadable: {error})"


@dataclass
class ServerSettings:
    """vLLM-named settings of the demo server."""

    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.95
    enable_prefix_caching: bool = False
    restart_delay_s: float = 3.0
    decode_step_ms: float = 30.0
    connect_retry_s: float = 0.0  # the proxy holds requests this long while the server restarts
    max_loras: int = (
        1  # the server runs as a LoRA-serving vLLM does (kfchaos.demo.server.lora); unused without adapters
    )

    def args(self) -> list[str]:
        out = ["--max-num-seqs", str(self.max_num_seqs), "--gpu-memory-utilization", str(self.gpu_memory_utilization),
               "--decode-step-ms", str(self.decode_step_ms)]  # fmt: skip
        if self.enable_prefix_caching:
            out.append("--enable-prefix-caching")
        # Adapter reads and slot swaps slow down with the decode step (the demo runs vLLM's clock slower).
        scale = self.decode_step_ms / 30.0
        out += ["--enable-lora", "--max-loras", str(self.max_loras),
                "--lora-load-ms", f"{200 * scale:g}", "--lora-swap-ms", f"{20 * scale:g}"]  # fmt: skip
        return out


@dataclass
class DemoStack:
    settings: ServerSettings | EngineDeployment
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kfchaos-demo-")))
    with_prometheus: bool = True
    # Tied: every process dies with this one (kfchaos.demo.stack.lifetime) and the work folder is locked while it runs.
    # `kfchaos demo up` starts an untied stack, which outlives it until `kfchaos demo down`.
    tied: bool = True
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    server_port: int = 0
    proxy_port: int = 0
    control_port: int = 0
    prometheus_port: int = 0
    supervisor_port: int = 0  # the real engine's supervisor's /metrics (the cluster's series); 0 for the demo server
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: bool = False
    _folder_lock: int | None = field(default=None, repr=False)

    @property
    def target_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    @property
    def prometheus_url(self) -> str | None:
        return f"http://127.0.0.1:{self.prometheus_port}" if self.prometheus_port else None

    @property
    def state_file(self) -> Path:
        return self.workdir / "server-state.json"

    def _spawn(self, command: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        # A stack may be started in another thread (the demo prepares its next scenario in the background): one
        # stopped meanwhile starts nothing more, so no process outlives the demo.
        with self._lock:
            if self._stopped:
                raise RuntimeError("the demo stack was stopped while it started")
            with safefile.stream(self.workdir / log, private=True) as out:
                # A new session: the whole group can be signalled, and Ctrl-C at the terminal reaches only us.
                process = lifetime.spawn(
                    command, tied=self.tied, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
                )
            self.processes.append(process)
            self._write_record()
        return process

    @property
    def record_file(self) -> Path:
        return self.workdir / RECORD_NAME

    def _write_record(self) -> None:
        """What this stack started, for `kfchaos demo down` when this process is gone without stopping it."""
        record = {"owner": os.getpid(), "tied": self.tied, "pids": [p.pid for p in self.processes],
                  "server_state": str(self.state_file)}  # fmt: skip
        safefile.write_text(self.record_file, json.dumps(record) + "\n", private=True)

    def start(self) -> DemoStack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.tied and self._folder_lock is None:
            self._folder_lock = safefile.lock_folder(self.workdir)
        self._on_free_ports(self._start_servers)
        if self.with_prometheus and shutil.which("prometheus"):
            self._on_free_ports(self._start_prometheus)
        return self

    def _on_free_ports(self, start: Callable[[], None]) -> None:
        """`start`, again on new ports (it picks them) while a server says its port was taken, PORT_TRIES in all;
        what a failed try started is stopped first."""
        for attempt in range(1, PORT_TRIES + 1):
            started = len(self.processes)
            try:
                start()
                return
            except PortTaken:
                self._stop_processes(self.processes[started:])
                with self._lock:
                    del self.processes[started:]
                    self._write_record()
                if attempt == PORT_TRIES:
                    raise

    def _start_servers(self) -> None:
        self.server_port, self.proxy_port, self.control_port = free_port(), free_port(), free_port()
        python = sys.executable
        if isinstance(self.settings, EngineDeployment):
            # The real vLLM engine in a memory cgroup, under a supervisor that exports the cluster's series of its
            # container on a port of its own (kfchaos.demo.stack.enginesupervisor).
            self.supervisor_port = free_port()
            server = self._spawn(
                [python, "-m", "kfchaos.demo.stack.enginesupervisor", "--port", str(self.server_port),
                 "--metrics-port", str(self.supervisor_port), "--state", str(self.state_file),
                 "--deployment", self.settings.to_json()],
                "server.log",
            )  # fmt: skip
            ready, ready_timeout = f"{self.server_url}/v1/models", READY_TIMEOUT  # the model listed: the engine is up
        else:
            server = self._spawn(
                [python, "-m", "kfchaos.demo.stack.supervisor", "--port", str(self.server_port),
                 "--state", str(self.state_file), "--restart-delay", str(self.settings.restart_delay_s),
                 *self.settings.args()],
                "server.log",
                # the runtime LoRA endpoints (kfchaos.demo.server.lora)
                {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
            )  # fmt: skip
            ready, ready_timeout = f"{self.server_url}/health", 30.0
        proxy = self._spawn(
            [python, "-m", "kfchaos.demo.faults.proxy", "--listen", f"127.0.0.1:{self.proxy_port}",
             "--control", f"127.0.0.1:{self.control_port}", "--upstream", self.server_url, "--seed", "0",
             "--connect-retry", str(self.settings.connect_retry_s)],
            "proxy.log",
        )  # fmt: skip
        wait_http(ready, ready_timeout, server, self.workdir / "server.log")
        if isinstance(self.settings, EngineDeployment):
            warm_up(self.server_url, self.settings.settings.served_model_name)
        wait_http(f"{self.control_url}/health", 30, proxy, self.workdir / "proxy.log")

    def _start_prometheus(self) -> None:
        self.prometheus_port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "demo-llm",
                    "honor_labels": True,
                    # The labels a Kubernetes service discovery would attach, so the standard queries
                    # (scoped by namespace and pod) find the demo server's series.
                    "static_configs": [
                        {
                            "targets": [f"127.0.0.1:{self.server_port}"],
                            "labels": {"namespace": DEMO_NAMESPACE, "pod": DEMO_POD, "container": "vllm"},
                        }
                    ],
                },
                # The real engine's supervisor: kube-state-metrics' and cAdvisor's series of its container, labelled
                # by the exporter itself (honor_labels, as a cluster's scrape of kube-state-metrics keeps them).
                *self._supervisor_jobs(),
            ],
        }
        config_file = self.workdir / "prometheus.yml"
        safefile.write_text(config_file, yaml.safe_dump(config), private=True)
        prometheus = self._spawn(
            [str(shutil.which("prometheus")), f"--config.file={config_file}",
             f"--storage.tsdb.path={self.workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.prometheus_port}"],
            "prometheus.log",
        )  # fmt: skip
        wait_http(f"{self.prometheus_url}/-/ready", 30, prometheus, self.workdir / "prometheus.log")
        # Ready is not scraped: a counter whose first sample already holds a burst's requests shows no
        # increase, so rate() over that burst is empty. The first scrape comes before any traffic.
        self.wait_scraped(after=time.time())

    def _supervisor_jobs(self) -> list[dict[str, Any]]:
        if not self.supervisor_port:
            return []
        return [{"job_name": "cluster-state", "honor_labels": True,
                 "static_configs": [{"targets": [f"127.0.0.1:{self.supervisor_port}"]}]}]  # fmt: skip

    def wait_scraped(self, after: float, timeout: float = 30.0) -> None:
        """Until Prometheus holds a scrape of the demo server taken after `after` (epoch seconds): the
        series then cover everything sent before it. A busy machine delays scrapes by seconds."""
        from kfchaos.metrics.prometheus import PrometheusClient, PrometheusError

        if not self.prometheus_url:
            return
        client = PrometheusClient(self.prometheus_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                samples = client.instant('timestamp(up{job="demo-llm"} == 1)')
            except PrometheusError:
                samples = []
            if any(sample.value >= after for sample in samples):
                return
            time.sleep(0.2)
        raise RuntimeError(f"Prometheus at {self.prometheus_url} took no scrape of the demo server in {timeout:g}s")

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._stop_processes(self.processes)
        # The supervisor's child is in the supervisor's session; if the supervisor died hard, end it too.
        try:
            pid = json.loads(self.state_file.read_text()).get("pid")
            if pid:
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        self.processes.clear()
        if self.tied:
            self.record_file.unlink(missing_ok=True)
        if self._folder_lock is not None:
            os.close(self._folder_lock)
            self._folder_lock = None

    def _stop_processes(self, processes: list[subprocess.Popen[bytes]]) -> None:
        for process in reversed(processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        # The real engine's supervisor stops vLLM (its engine core and worker) and removes its cgroup first.
        deadline = time.monotonic() + (30 if self.supervisor_port else 10)
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

    def __enter__(self) -> DemoStack:
        self._previous = stop_on_signals()
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def stop_on_signals() -> dict[int, Any]:
    """SIGTERM and SIGINT both tear down like Ctrl-C (KeyboardInterrupt), whatever this process inherited: a job a
    shell without job control starts in the background (a CI runner's, a script's `cmd &`) inherits SIGINT ignored,
    and Python keeps it ignored, so a stack there slept on through its SIGINT. Returns the handlers it replaced."""
    return {signum: signal.signal(signum, _raise_interrupt) for signum in termination.SIGNALS}


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
