"""A memory cgroup of this machine to start a process tree in: a container's memory limit without a container.

The kernel's OOM killer then acts at the limit as it does in a pod (one process of the group chosen by its
badness, not necessarily the first: Linux mm/oom_kill.c `select_bad_process` over the memcg's tasks), and the
cgroup's own counter records each kill, as containerd's shim reads it for its TaskOOM event (containerd
pkg/oom/v1/v1.go: the memory.oom_control eventfd; pkg/oom/v2/v2.go: memory.events `oom_kill`).
- cgroup v1: /sys/fs/cgroup/memory/<name>, `memory.limit_in_bytes`, `memory.oom_control` (`oom_kill N`, Linux 4.13+);
  only the chosen process dies (no group kill on v1).
- cgroup v2: /sys/fs/cgroup/<name> under the root (the root is exempt from "no internal processes"),
  `memory.max`, `memory.events` (`oom_kill N`); `memory.oom.group` left 0, as the kubelet leaves it where
  singleProcessOOMKill is set (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container_linux.go).
Creating one needs root (or a delegated hierarchy): `unavailable()` says why not, before anything starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def version(root: Path = ROOT) -> int | None:
    """2 for a unified hierarchy, 1 for v1 with a memory controller, None for neither."""
    if (root / "cgroup.controllers").exists():
        return 2
    if (root / "memory" / "memory.limit_in_bytes").exists():
        return 1
    return None


def unavailable(root: Path | None = None) -> str | None:
    """Why no memory cgroup can be made here, or None when one can (`root`: the cgroup fs, ROOT when None)."""
    root = ROOT if root is None else root
    found = version(root)
    if found is None:
        return f"no memory cgroup hierarchy under {root}"
    parent = root / "memory" if found == 1 else root
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable (a memory cgroup needs root or a delegated hierarchy)"
    return None


class MemoryCgroup:
    def __init__(self, name: str, limit_bytes: int, root: Path = ROOT) -> None:
        found = version(root)
        if found is None:
            raise OSError(f"no memory cgroup hierarchy under {root}")
        self.version = found
        self.path = (root / "memory" / name) if found == 1 else (root / name)
        self.limit_bytes = limit_bytes
        if found == 2:
            control = root / "cgroup.subtree_control"
            if "memory" not in control.read_text().split():
                control.write_text("+memory")
        self.path.mkdir(exist_ok=True)
        limit_file = "memory.limit_in_bytes" if found == 1 else "memory.max"
        (self.path / limit_file).write_text(str(limit_bytes))

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run from inside the cgroup: the shell moves itself in, then execs it (every child stays in)."""
        procs = self.path / "cgroup.procs"
        return ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "kfchaos-memcg", *argv]

    def _counter(self, file: str, key: str) -> int:
        for line in (self.path / file).read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
        return 0

    def oom_kills(self) -> int:
        """The kernel's OOM kills in this cgroup so far."""
        return self._counter("memory.oom_control" if self.version == 1 else "memory.events", "oom_kill")

    def usage_bytes(self) -> int:
        return int((self.path / ("memory.usage_in_bytes" if self.version == 1 else "memory.current")).read_text())

    def working_set_bytes(self) -> int:
        """Usage less the inactive file pages, as cAdvisor computes its working set (google/cadvisor
        container/libcontainer/handler.go setMemoryStats: v1 `total_inactive_file`, v2 `inactive_file`)."""
        key = "total_inactive_file" if self.version == 1 else "inactive_file"
        return max(0, self.usage_bytes() - self._counter("memory.stat", key))

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def remove(self, timeout: float = 10.0) -> None:
        """Kill what is left in it and remove it."""
        deadline = time.monotonic() + timeout
        while self.path.exists():
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
