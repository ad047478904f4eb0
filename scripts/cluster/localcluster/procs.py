"""Processes of the local control plane: each in its own process group, recorded under the state directory.

`start` writes `<state>/pids/<name>` (the process group id) before anything else can fail, so `stop_all`
finds every process a half-finished start left behind. A recorded id is signalled only while
/proc/<pid>/environ still carries this state directory's marker: a recycled pid is never killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

MARKER = "KFCHAOS_CLUSTER_STATE"
STOP_GRACE = 10.0


def _pid_dir(state: Path) -> Path:
    return state / "pids"


def start(state: Path, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    logs = state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    _pid_dir(state).mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {}), MARKER: str(state.resolve())}
    with (logs / f"{name}.log").open("ab") as log:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,  # its own process group: stop_all signals the group
        )
    (_pid_dir(state) / name).write_text(str(process.pid))
    _children[(str(state.resolve()), name)] = process
    return process


# Processes started by this Python process: their liveness is poll(), which has no window in which a just
# exec'd child's /proc entry does not show the marker yet.
_children: dict[tuple[str, str], subprocess.Popen[bytes]] = {}


def _ours(state: Path, pid: int) -> bool:
    """A live (not zombie) process started for this state directory."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return False
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except (OSError, IndexError):
        return False
    return f"{MARKER}={state.resolve()}".encode() in environ.split(b"\0")


def alive(state: Path, name: str) -> bool:
    child = _children.get((str(state.resolve()), name))
    if child is not None:
        return child.poll() is None
    path = _pid_dir(state) / name
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return False
    return _ours(state, pid)


def log_tail(state: Path, name: str, chars: int = 3000) -> str:
    try:
        return (state / "logs" / f"{name}.log").read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_all(state: Path, order: Sequence[str] = ()) -> list[str]:
    """SIGTERM each recorded group (those in `order` first, in that order), SIGKILL what outlives the grace."""
    pid_dir = _pid_dir(state)
    if not pid_dir.is_dir():
        return []
    names = [n for n in order if (pid_dir / n).exists()]
    names += sorted(p.name for p in pid_dir.iterdir() if p.name not in names)
    return [name for name in names if _stop_one(state, name)]


def _stop_one(state: Path, name: str) -> bool:
    """SIGTERM the recorded group `name`, SIGKILL it after the grace; True when it was running."""
    path = _pid_dir(state) / name
    try:
        pgid = int(path.read_text().strip())
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return False
    child = _children.pop((str(state.resolve()), name), None)

    def running() -> bool:
        return child.poll() is None if child is not None else _ours(state, pgid)

    was_running = running()
    if was_running:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _signal_group(pgid, sig)
            deadline = time.monotonic() + STOP_GRACE
            while running() and time.monotonic() < deadline:
                _reap(pgid)
                time.sleep(0.05)
            if not running():
                break
    # Children that outlived their leader still carry the group id (and the marker).
    for member in _group_members(pgid):
        if _ours(state, member):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
    path.unlink(missing_ok=True)
    return was_running


def stop(state: Path, name: str) -> tuple[list[str], dict[str, str]]:
    """Stop one component, as an outage of it (the cluster suite's doctor tests), and return its command line
    and environment (read from /proc while it runs) so `start` can bring it back as it was."""
    pgid = int((_pid_dir(state) / name).read_text().strip())
    if not _ours(state, pgid):
        raise ProcessLookupError(f"{name} (pid {pgid}) is not running for {state}")
    argv = [a.decode() for a in Path(f"/proc/{pgid}/cmdline").read_bytes().split(b"\0")[:-1]]
    pairs = [e.decode(errors="surrogateescape") for e in Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0") if e]
    env = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
    _stop_one(state, name)
    return argv, env


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # /proc/<pid>/stat after the command: state, ppid, pgrp, ...
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def leftovers(state: Path) -> list[int]:
    """Pids of any process still carrying this state directory's marker (should be none after stop_all)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ours(state, int(entry.name)):
            found.append(int(entry.name))
    return found


def describe(pids: Sequence[int]) -> str:
    parts = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = "(gone)"
        parts.append(f"{pid} {command.strip()}")
    return "; ".join(parts)
