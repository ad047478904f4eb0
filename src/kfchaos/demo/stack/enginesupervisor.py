"""Keeps the REAL vLLM engine running the way a kubelet on cgroup v1 keeps a container running, and exports what
kube-state-metrics and cAdvisor would say about it.

Each container is vLLM's OpenAI API server (kfchaos.demo.stack.vllmengine.EngineServer) started in a memory cgroup of
its own with the container's limit (kfchaos.demo.stack.memcgroup), so the kernel's OOM killer acts at the limit as in a
pod.
On cgroup v1 it kills one process, chosen by its badness (Linux mm/oom_kill.c select_bad_process): the engine's
worker (`VLLM::Worker`, which holds the weights, the KV cache and each step's activations), not the API server,
the container's first process. vLLM then fails every request with EngineDeadError (HTTP 500) and its API server
shuts itself down and exits 0 (vllm-project/vllm vllm/v1/executor/multiproc_executor.py start_worker_monitor:
"Worker proc ... died unexpectedly"; vllm/entrypoints/launcher.py terminate_if_errored; vllm-project/vllm#48966).
How that container's end is recorded is the supervisor's own rule (kfchaos.demo.stack.supervisor.terminated:
containerd's TaskOOM for any process of the cgroup makes it OOMKilled, even with exit code 0), counted from the cgroup's
own
oom_kill counter, which is what containerd's shim watches (pkg/oom/v1/v1.go). The restart loop, the restart count, the
state file (read by the local fault backend and the OOM evidence's pod view) and the container events are
kfchaos.demo.stack.supervisor's; this module only says how a container of the real engine starts, ends and is measured.

The series (kfchaos.demo.server.kubeseries) are served on `--metrics-port`, which Prometheus scrapes beside vLLM's own
/metrics, as kube-state-metrics and the kubelet's cAdvisor are scraped beside a pod.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.registry import Collector

from kfchaos.demo.server import kubeseries
from kfchaos.demo.server.pod import DEMO_CONTAINER, DEMO_NAMESPACE, DEMO_POD, DEMO_POD_UID
from kfchaos.demo.stack.enginedeploy import EngineDeployment
from kfchaos.demo.stack.supervisor import Supervisor
from kfchaos.demo.stack.vllmengine import EngineInstall, EngineServer, engine_home

POD = kubeseries.Pod(DEMO_NAMESPACE, DEMO_POD, DEMO_POD_UID, DEMO_CONTAINER)


class EngineSupervisor(Supervisor):
    def __init__(self, deployment: EngineDeployment, state_file: Path, port: int, install: EngineInstall) -> None:
        super().__init__([], state_file, deployment.restart_delay_s)
        # Each container's vLLM log beside the state file (the demo's work folder), where a user looks for it.
        self.workdir.rmdir()
        self.workdir = state_file.parent / "containers"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.deployment = deployment
        self.port = port
        self.install = install
        self.server: EngineServer | None = None
        self.container_id = "c0"
        # The pod status's lastState while the ended container is still State Terminated: the termination before it.
        self.last_before: tuple[str | None, int | None] = (None, None)

    def _start_child(self) -> None:
        # A new container is a new cgroup (the runtime makes one per container): its OOM counter starts at 0.
        self.server = EngineServer(
            self.install,
            self.deployment.settings,
            self.workdir / f"container-{self.restarts}.log",
            port=self.port,
            memory_limit_bytes=self.deployment.memory_limit_bytes,
            cgroup_name=f"kfchaos-engine-{os.getpid()}-c{self.restarts}",
        )
        self.server.start(wait=False)
        with self.lock:  # the new container's id and process together, as a scrape reads them
            self.container_id = f"c{self.restarts}"  # its cgroup's series' id, whatever the restart count says
            self.child = self.server.process
            self.started_at = time.time()
        if self.stopping and self.child is not None:  # told to stop while this container started: stop it too
            os.killpg(self.child.pid, signal.SIGTERM)
        self._event("Created", "Created container vllm")
        self._event("Started", "Started container vllm")
        self._write_state()

    def _container_ended(self) -> int:
        """The kernel's OOM kills in the ended container's cgroup; then its leftovers killed and the cgroup removed
        (the worker or engine core may outlive the API server by a moment)."""
        self.last_before = (self.last_reason, self.last_exit_code)
        server = self.server
        if server is None:
            return 0
        kills = server.cgroup.oom_kills() if server.cgroup is not None else 0
        server.stop(grace=1.0)
        return kills

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGTERM)  # the server leads its own group: engine core and worker

    def run(self) -> int:
        try:
            return super().run()
        finally:
            if self.server is not None:
                self.server.stop(grace=10.0)  # the last container and its cgroup, however the loop ended

    def series(self) -> kubeseries.ContainerSeries:
        with self.lock:
            return self._series()

    def _series(self) -> kubeseries.ContainerSeries:
        server = self.server
        running = server is not None and self.child is not None and server.cgroup is not None
        cgroup = server.cgroup if running and server is not None else None
        oom_events = working_set = None
        if cgroup is not None:
            with contextlib.suppress(OSError):  # removed between the check and the read: no cgroup, no series
                oom_events, working_set = cgroup.oom_kills(), cgroup.working_set_bytes()
        live = oom_events is not None
        restarts, (last_reason, last_exit_code) = self.restarts, (self.last_reason, self.last_exit_code)
        if self.terminated_reason is not None:
            # Between an exit and the next start the container is State Terminated with its own reason; the restart
            # count steps, and lastState takes that termination, only when the kubelet creates the next container
            # (kuberuntime gives it the dead one's count + 1: pkg/kubelet/kuberuntime/kuberuntime_container.go;
            # kubelet_pods.go convertToAPIContainerStatuses). The supervisor counts at the exit, so undo it here.
            restarts, (last_reason, last_exit_code) = self.restarts - 1, self.last_before
        return kubeseries.ContainerSeries(
            restarts=restarts,
            last_reason=last_reason,
            last_exit_code=last_exit_code,
            terminated_reason=self.terminated_reason,
            memory_limit_bytes=self.deployment.memory_limit_bytes,
            # The running container's own id: the supervisor counts the restart before it has removed the ended
            # container's cgroup, and that cgroup's count exported under the next id read as a new kill.
            container_id=self.container_id if live else None,
            started_at=self.started_at if live else None,
            oom_events=oom_events or 0,
            working_set_bytes=working_set,
        )


class _Exporter(Collector):
    """The series, read at each scrape from the supervisor's state and the live cgroup."""

    def __init__(self, supervisor: EngineSupervisor) -> None:
        self.supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        yield from kubeseries.families(POD, self.supervisor.series())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kfchaos-engine-supervisor", description=__doc__)
    parser.add_argument("--state", type=Path, required=True, help="JSON state file (child pid, counts)")
    parser.add_argument("--port", type=int, required=True, help="vLLM's port (loopback)")
    parser.add_argument("--metrics-port", type=int, required=True, help="this supervisor's /metrics (loopback)")
    parser.add_argument(
        "--deployment", required=True, help="EngineDeployment as JSON (kfchaos.demo.stack.enginedeploy)"
    )
    args = parser.parse_args(argv)
    install = EngineInstall(engine_home())
    if not install.ready():
        print(f"kfchaos-engine-supervisor: {install.missing()}", file=sys.stderr)
        return 2
    supervisor = EngineSupervisor(EngineDeployment.from_json(args.deployment), args.state, args.port, install)
    registry = CollectorRegistry(auto_describe=False)  # only the container's series, none of this process's own
    registry.register(_Exporter(supervisor))
    start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
