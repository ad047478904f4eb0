#!/usr/bin/python3
"""memStress for the local node's chaos-daemon image: StressChaos's memory stressor. chaos-daemon runs
`memStress --size S --workers N [--time T]` in the target's pid namespace and moves it into the target container's
cgroup (chaos-mesh/chaos-mesh, pkg/chaosdaemon/stress_server_linux.go, ExecMemoryStressors). Upstream's memStress
is a Go program released as a GitHub download (chaos-mesh/memStress, main.go; images/chaos-daemon/Dockerfile) whose
module path (`main`) the Go module proxy cannot serve. This is a port of its main.go:

- the server (no --client) keeps N clients running, starting one whenever fewer than N run, at most one a second,
  each with SIGTERM as its parent-death signal (so the clients die with it);
- a client maps size/N bytes of anonymous memory and writes every page, either at once or linearly over --time
  (one step every 10 ms), then holds it until killed;
- --size is a byte count as go-humanize's ParseBytes reads it ("256MB" is 256*10^6, "256MiB" 256*2^20) or a
  percentage of the machine's total memory ("50%", MemTotal of /proc/meminfo, as gopsutil's VirtualMemory).
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
# go-humanize bytes.go, bytesSizeTable (lower-cased unit -> multiplier).
UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "ki": 2**10, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mi": 2**20, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gi": 2**30, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "ti": 2**40, "tib": 2**40,
    "p": 10**15, "pb": 10**15, "pi": 2**50, "pib": 2**50,
}  # fmt: skip
GO_DURATION = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*([0-9.,]+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).lower() not in UNITS:
        raise ValueError(f"unhandled size: {text!r}")
    return int(float(match.group(1).replace(",", "")) * UNITS[match.group(2).lower()])


def parse_duration(text: str) -> float:
    if text in ("0", ""):
        return 0.0
    parts = re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration: {text!r}")
    return sum(float(n) * GO_DURATION[u] for n, u in parts)


def total_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise OSError("/proc/meminfo has no MemTotal")


def run_client(length: int, grow_over: float) -> None:
    data = mmap.mmap(-1, max(length, mmap.PAGESIZE))
    pages = length // mmap.PAGESIZE
    if grow_over > 0:
        start = time.monotonic()
        done = 0
        while done < pages:
            elapsed = min(time.monotonic() - start, grow_over)
            expected = int(pages * elapsed / grow_over)
            for page in range(done, expected):
                data[page * mmap.PAGESIZE] = 0
            done = expected
            if elapsed < grow_over:
                time.sleep(0.01)
    else:
        for page in range(pages):
            data[page * mmap.PAGESIZE] = 0
    while True:
        time.sleep(2)


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_server(args: argparse.Namespace) -> None:
    slots = threading.Semaphore(args.workers)

    def one() -> None:
        try:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--size",
                    args.size,
                    "--workers",
                    str(args.workers),
                    "--time",
                    args.time,
                    "--client",
                    "1",
                ],
                preexec_fn=_die_with_parent,
                check=False,
            )
        finally:
            slots.release()

    while True:
        slots.acquire()
        threading.Thread(target=one, daemon=True).start()
        time.sleep(1)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="memStress")
    parser.add_argument("--size", default="0KB")
    parser.add_argument("--time", default="0s")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--client", default=None)
    args = parser.parse_args(argv)
    if args.client is None:
        run_server(args)
        return
    percent = args.size.endswith("%")
    length = int(total_memory() / 100.0 * float(args.size[:-1])) if percent else parse_bytes(args.size)
    run_client(length // max(args.workers, 1), parse_duration(args.time))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    main(sys.argv[1:])
