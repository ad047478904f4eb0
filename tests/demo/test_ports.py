"""The demo stack's ports (kfchaos.demo.stack.ports): never one the kernel may hand to an outgoing connection between
the pick and the server's bind (a CI run lost `kfchaos demo up` to "exited before answering" while a load test ran
beside it)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kfchaos.demo.stack import demostack, ports


def test_a_picked_port_is_free_and_below_the_kernels_ephemeral_range() -> None:
    low, _ = ports.ephemeral_range()
    for _ in range(50):
        port = ports.free_port()
        assert ports.LOWEST <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nothing holds it


def test_a_port_held_by_a_listener_is_not_free() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert not ports.is_free(listener.getsockname()[1])


def test_the_range_is_read_from_proc_and_defaults_to_linuxs(tmp_path: Path) -> None:
    text = tmp_path / "ip_local_port_range"
    text.write_text("40000\t50000\n")
    assert ports.ephemeral_range(text) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "absent") == ports.DEFAULT_EPHEMERAL
    text.write_text("garbage")
    assert ports.ephemeral_range(text) == ports.DEFAULT_EPHEMERAL


def test_with_no_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    port = ports.free_port()
    assert 1024 <= port <= 65535 and ports.is_free(port)


def test_a_stack_whose_port_is_taken_before_its_server_binds_starts_on_new_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race a pick cannot close: another process binds the port between the pick and the server's bind. The
    server's log says so, and the stack starts again on new ports instead of waiting out its timeout."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(demostack, "free_port", lambda: next(picks, None) or ports.free_port())
        stack = demostack.DemoStack(demostack.ServerSettings(restart_delay_s=0.2), with_prometheus=False)
        try:
            stack.start()
            assert stack.server_port != taken
            assert len(stack.processes) == 2 and all(p.poll() is None for p in stack.processes)
            assert "address already in use" not in (stack.workdir / "server.log").read_text()
        finally:
            stack.stop()
