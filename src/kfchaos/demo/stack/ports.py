"""A free loopback port: one place, for the demo stack (kfchaos.demo.stack.demostack) and the real engine alike."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux's default ephemeral range, used where /proc does not say (net/ipv4/af_inet.c, inet_init_net).
DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 10000  # above the well-known and most registered service ports
_PICKS = random.SystemRandom()


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The ports the kernel hands out by itself: to bind(port 0) and as the source port of outgoing connections."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nothing holds now, for a server started next.

    Not one the kernel picks (bind to port 0): those come from the ephemeral range, which the kernel also hands out as
    the source port of every outgoing connection. Between this call and the server's own bind, a load generator beside
    us (a replay, another test) may take the port for a connection, and the server then exits with "address already in
    use". A random port below the range is never handed out by the kernel; two of our own picks meet about once in
    20 000. Where the range leaves no room below it, the kernel's pick."""
    low, _ = ephemeral_range()
    if low - LOWEST >= 1000:
        for _ in range(64):
            port = _PICKS.randrange(LOWEST, low)
            if is_free(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
