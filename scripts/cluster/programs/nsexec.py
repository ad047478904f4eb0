#!/usr/bin/python3
"""nsexec for the local node's chaos-daemon image: chaos-daemon runs every command it places in a target's
namespaces as `nsexec [-c F] [-i F] [-n F] [-p F] [-m F] [-l] -- CMD ARGS...` (chaos-mesh/chaos-mesh,
pkg/bpm/build_linux.go). Upstream's nsexec is a Rust program shipped as a GitHub release download
(chaos-mesh/nsexec, src/main.rs; images/chaos-daemon/Dockerfile), which no registry here serves. This is a port of
that main.rs, step for step: setns into the cgroup, ipc, net, pid and mount namespaces in that order, spawn the
command as a child (so it is inside the entered pid namespace), forward SIGINT and SIGTERM to it as SIGTERM (how
chaos-daemon stops a stressor: bpm.KillBackgroundProcess sends SIGTERM to this process), and exit with its exit
code (0 when it died of a signal, as main.rs falls off its end then).

Not ported: `-l` (run a program of the daemon's own filesystem inside the target's mount namespace), which needs
upstream's LD_PRELOAD library libnsenter.so; the faults that use it (IOChaos, HTTPChaos, BlockChaos, JVMChaos)
need toda, tproxy or byteman too, none of which is in this image. It exits 127 saying so.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys

# <sched.h>: the nstype argument of setns(2).
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNS = 0x00020000

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, nstype) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nsexec")
    parser.add_argument("-c", "--cgroup")
    parser.add_argument("-i", "--ipc")
    parser.add_argument("-m", "--mnt")
    parser.add_argument("-n", "--net")
    parser.add_argument("-p", "--pid")
    parser.add_argument("-l", "--local", action="store_true")
    parser.add_argument("-k", "--keep-fd", type=int, action="append", default=[])
    parser.add_argument("--library-path", default="/usr/local/lib/libnsenter.so")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    command = opts.cmd[1:] if opts.cmd[:1] == ["--"] else opts.cmd
    if not command:
        parser.error("a command is required")
    if opts.local:
        print(f"nsexec: --local needs {opts.library_path}, which this image does not have", file=sys.stderr)
        return 127
    for path, nstype in (
        (opts.cgroup, CLONE_NEWCGROUP),
        (opts.ipc, CLONE_NEWIPC),
        (opts.net, CLONE_NEWNET),
        (opts.pid, CLONE_NEWPID),
        (opts.mnt, CLONE_NEWNS),
    ):
        if path:
            _setns(path, nstype)
    child = subprocess.Popen(command, pass_fds=tuple(opts.keep_fd))

    def forward(_signum: int, _frame: object) -> None:
        child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    status = child.wait()
    return status if status >= 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
