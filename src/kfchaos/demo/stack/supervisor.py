"""Keeps the demo LLM server running the way a kubelet keeps a container running.

It starts the server as a child process, and when the child dies it starts it again after a restart
delay (the time a real server takes to load its weights), as a new container of the same pod. Like the
kubelet it keeps a restart count and the last termination (reason and exit code: OOMKilled when the child
left its OOM marker before ending itself, as the kernel's OOM killer ends a cgroup; Error for another
non-zero exit, 137 for SIGKILL; Completed for exit 0 -- containerd's reasons), and passes them to the new
child, which exports them as kube-state-metrics does (kfchaos.demo.server.api `_export_container_status`).
It does not count OOM kills for the verdict: the verdict counts them from those series, as on a cluster.
Each child's output goes to the terminal and to its own log file; the previous child's log is kept, as the
kubelet keeps one previous container's log (`kubectl logs --previous`), and named in the state file for
the crash-log evidence (kfchaos.metrics.crashlogs).
The current child's pid, the counts and the previous log are kept in a JSON state file, which the local
fault backend reads to kill "the pod". For the OOM evidence bundle (kfchaos.demo.faults.kubeview) it also keeps what
the kubelet would put in the pod status (the current container's start, the last one's start and finish)
and the kubelet's container events (Created, Started: pkg/kubelet/events/event.go), counted per reason and
message as client-go's event correlator aggregates repeats (tools/record/events_cache.go).
SIGTERM or SIGINT stop the child and the supervisor.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from kfchaos import safefile
from kfchaos.demo.server import lora
from kfchaos.demo.server.api import add_engine_arguments
from kfchaos.demo.stack import lifetime


class Supervisor:
    def __init__(self, server_args: list[str], state_file: Path, restart_delay: float) -> None:
        self.server_args = server_args
        self.state_file = state_file
        self.restart_delay = restart_delay
        self.restarts = 0
        self.oom_kills = 0  # for the demo's own summary line only
        self.last_reason: str | None = None
        self.last_exit_code: int | None = None
        self.terminated_reason: str | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.workdir = Path(tempfile.mkdtemp(prefix="kfchaos-demo-"))
        self.oom_marker = self.workdir / "oom"
        self.previous_log: Path | None = None
        self._tee: threading.Thread | None = None
        self.started_at: float | None = None
        self.last_started_at: float | None = None
        self.last_finished_at: float | None = None
        self.events: dict[tuple[str, str], dict[str, object]] = {}
        self.lock = threading.Lock()  # the counts and reasons change together (EngineSupervisor's scrapes read them)

    def _event(self, reason: str, message: str) -> None:
        now = time.time()
        event = self.events.setdefault((reason, message), {"type": "Normal", "reason": reason, "message": message,
                                                           "count": 0, "first": now})  # fmt: skip
        event["count"] = int(str(event["count"])) + 1
        event["last"] = now

    def _write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "pid": self.child.pid if self.child else None,
            "restarts": self.restarts,
            "oom_kills": self.oom_kills,
            "last_terminated_reason": self.last_reason,
            "last_exit_code": self.last_exit_code,
            "terminated_reason": self.terminated_reason,
            "previous_log": str(self.previous_log) if self.previous_log else None,
            "started_at": self.started_at,
            "last_started_at": self.last_started_at,
            "last_finished_at": self.last_finished_at,
            "events": list(self.events.values()),
        }
        safefile.write_text(self.state_file, json.dumps(state), private=True)  # renamed into place: never half-read

    def _start_child(self) -> None:
        command = [
            sys.executable,
            "-m",
            "kfchaos.demo.server.api",
            *self.server_args,
            "--restarts",
            str(self.restarts),
            "--container-id",
            f"c{self.restarts}",
        ]
        if self.last_reason is not None:
            command += ["--last-terminated-reason", self.last_reason, "--last-exit-code", str(self.last_exit_code)]
        env = dict(os.environ, KFCHAOS_DEMO_OOM_MARKER=str(self.oom_marker))
        log = self.workdir / f"container-{self.restarts}.log"
        # The server dies with the supervisor, however the supervisor ends (its main thread forks it).
        self.child = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=lifetime.die_with_parent(),
        )
        self.started_at = time.time()
        self._event("Created", "Created container vllm")
        self._event("Started", "Started container vllm")
        self._tee = threading.Thread(target=_tee, args=(self.child, log), daemon=True)
        self._tee.start()
        self._write_state()

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        if self.child and self.child.poll() is None:
            self.child.terminate()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self._start_child()
        while True:
            assert self.child is not None
            code = self.child.wait()
            if self.stopping:
                self.state_file.unlink(missing_ok=True)
                return 0
            if self._tee is not None:
                self._tee.join(timeout=5)
            finished_at = time.time()
            kills = self._container_ended()
            # The end is recorded at once, under the lock the exporter's scrapes take: a scrape that saw the restart
            # counted before its reason would count a restart of unknown cause (kfchaos.metrics.oom: unread).
            with self.lock:
                self.previous_log = self.workdir / f"container-{self.restarts}.log"
                self.last_started_at, self.last_finished_at = self.started_at, finished_at
                self.restarts += 1
                self.oom_kills += kills
                self.last_reason, self.last_exit_code = terminated(code, oom_killed=kills > 0)
                self.child = None
                self.terminated_reason = self.last_reason  # State Terminated until the next container starts
            print(f"demo-supervisor: server exited with {code} ({self.last_reason}, kernel OOM kills in it: {kills}); "
                  "restarting", file=sys.stderr)  # fmt: skip
            self._write_state()
            deadline = time.monotonic() + self.restart_delay
            while time.monotonic() < deadline and not self.stopping:
                time.sleep(0.05)
            if self.stopping:
                self.state_file.unlink(missing_ok=True)
                return 0
            with self.lock:
                self.terminated_reason = None
            self._start_child()

    def _container_ended(self) -> int:
        """The kernel's OOM kills in the container that just ended (the demo server leaves its marker before it
        ends itself, as the kernel's OOM killer would end it), and whatever the container leaves behind removed."""
        if self.oom_marker.exists():
            self.oom_marker.unlink()
            return 1
        return 0


def terminated(code: int, oom_killed: bool) -> tuple[str, int]:
    """(reason, exit code) of a container that ended with `code` (Popen's: negative for a signal), as containerd's
    CRI plugin records it: a signal death reads as 128 + the signal number (SIGKILL -> 137); the reason is OOMKilled
    when an OOM event came for the container, else Error for a non-zero exit, Completed for 0 (containerd
    internal/cri/server/container_status.go toCRIContainerStatus: oomExitReason, errorExitReason,
    completeExitReason). The OOM event is containerd's TaskOOM, which its shim publishes for an OOM kill of ANY
    process of the container's cgroup (pkg/oom/v1/v1.go: memory.oom_control's eventfd; pkg/oom/v2/v2.go:
    memory.events oom_kill), and the CRI plugin sets Reason=OOMKilled on it even while the container runs
    (pkg/cri/server/events.go handleEvent, TaskOOM case), so the reason sticks to whatever exit comes later, exit
    code 0 included: kubernetes/kubernetes#104454 (cgroup v1, or singleProcessOOMKill on v2). With
    memory.oom.group (the kubelet's default on cgroup v2 since 1.28) the whole container dies with 137 instead."""
    exit_code = 128 - code if code < 0 else code
    if oom_killed:
        return "OOMKilled", exit_code
    return ("Completed" if code == 0 else "Error"), exit_code


def _tee(child: subprocess.Popen[bytes], log: Path) -> None:
    """The child's output to our stderr (the stack's server.log) and to this container's own log file."""
    assert child.stdout is not None
    with safefile.stream(log, private=True) as handle:
        for line in child.stdout:
            handle.write(line)
            handle.flush()
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kfchaos-demo-supervisor", description=__doc__)
    parser.add_argument("--state", type=Path, required=True, help="JSON state file (child pid, counts)")
    parser.add_argument("--restart-delay", type=float, default=2.0, help="seconds, like loading weights")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="demo/llama-3-8b-sim")
    add_engine_arguments(parser)
    lora.add_arguments(parser)
    args, _ = parser.parse_known_args(argv)
    server_args = [
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--model",
        args.model,
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--gpu-memory-utilization",
        str(args.gpu_memory_utilization),
        "--block-size",
        str(args.block_size),
        "--memory-limit-gib",
        str(args.memory_limit_gib),
        "--decode-step-ms",
        str(args.decode_step_ms),
        "--max-model-len",
        str(args.max_model_len),
    ]
    if args.enable_prefix_caching:
        server_args.append("--enable-prefix-caching")
    server_args += lora.server_args(args)
    return Supervisor(server_args, args.state, args.restart_delay).run()


if __name__ == "__main__":
    sys.exit(main())
