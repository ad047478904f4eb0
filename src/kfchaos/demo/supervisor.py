"""Keeps the demo LLM server running the way a kubelet keeps a container running.

It starts the server as a child process, and when the child dies it starts it again after a restart
delay (the time a real server takes to load its weights), counting restarts and, separately, OOM kills
(the child leaves a marker file before it ends itself for OOM). The counts are passed to the new child,
which exports them as `container_oom_events_total` and `kube_pod_container_status_restarts_total`.
The current child's pid and the counts are kept in a JSON state file, which the local fault backend
reads to kill "the pod". SIGTERM or SIGINT stop the child and the supervisor; nothing is left running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from kfchaos.demo.server import add_engine_arguments


class Supervisor:
    def __init__(self, server_args: list[str], state_file: Path, restart_delay: float) -> None:
        self.server_args = server_args
        self.state_file = state_file
        self.restart_delay = restart_delay
        self.restarts = 0
        self.oom_kills = 0
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.oom_marker = Path(tempfile.mkdtemp(prefix="kfchaos-demo-")) / "oom"

    def _write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "pid": self.child.pid if self.child else None,
            "restarts": self.restarts,
            "oom_kills": self.oom_kills,
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_file)

    def _start_child(self) -> None:
        command = [
            sys.executable,
            "-m",
            "kfchaos.demo.server",
            *self.server_args,
            "--restarts",
            str(self.restarts),
            "--oom-kills",
            str(self.oom_kills),
        ]
        env = dict(os.environ, KFCHAOS_DEMO_OOM_MARKER=str(self.oom_marker))
        self.child = subprocess.Popen(command, env=env)
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
            self.restarts += 1
            if self.oom_marker.exists():
                self.oom_marker.unlink()
                self.oom_kills += 1
                print(f"demo-supervisor: server OOM-killed (kill #{self.oom_kills}); restarting", file=sys.stderr)
            else:
                print(f"demo-supervisor: server exited with {code}; restarting", file=sys.stderr)
            self.child = None
            self._write_state()
            deadline = time.monotonic() + self.restart_delay
            while time.monotonic() < deadline and not self.stopping:
                time.sleep(0.05)
            if self.stopping:
                self.state_file.unlink(missing_ok=True)
                return 0
            self._start_child()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kfchaos-demo-supervisor", description=__doc__)
    parser.add_argument("--state", type=Path, required=True, help="JSON state file (child pid, counts)")
    parser.add_argument("--restart-delay", type=float, default=2.0, help="seconds, like loading weights")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="demo/llama-3-8b-sim")
    add_engine_arguments(parser)
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
    ]
    if args.enable_prefix_caching:
        server_args.append("--enable-prefix-caching")
    return Supervisor(server_args, args.state, args.restart_delay).run()


if __name__ == "__main__":
    sys.exit(main())
