"""sim.ports.free_port: the ports tests and the simulator start servers on."""

from __future__ import annotations

import socket

from sim import ports


def test_a_picked_port_is_below_the_ephemeral_range_bindable_and_not_picked_twice(
    monkeypatch,
) -> None:
    """An outgoing connection's local port comes from the ephemeral range, so a port
    picked there could be taken before the server binds it (a CI failure: "address in
    use" at a documented server's start)."""
    start = 32768  # Linux's default range start, whatever this machine's says
    monkeypatch.setattr(ports, "_ephemeral_start", lambda: start)
    picked = [ports.free_port() for _ in range(200)]
    assert len(set(picked)) == len(picked)
    assert all(ports.PICK_PORT_LOW <= port < start for port in picked)
    with socket.socket() as server:
        server.bind(("127.0.0.1", picked[-1]))


def test_a_port_something_listens_on_is_never_picked(monkeypatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        monkeypatch.setattr(ports, "PICK_PORT_LOW", held)
        monkeypatch.setattr(ports, "_ephemeral_start", lambda: held + 1000)
        monkeypatch.setattr(ports._random, "randrange", lambda low, high: held)
        assert ports.free_port() != held  # every try found it taken: the OS's pick


def test_each_test_worker_picks_from_its_own_ports(monkeypatch) -> None:
    """Two pytest-xdist workers picked the same port now and then: the second server
    to bind it did not start. Each worker now picks only its residue of the count."""
    monkeypatch.setattr(ports, "_ephemeral_start", lambda: 32768)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        picked = [ports.free_port() for _ in range(50)]
        assert {(port - ports.PICK_PORT_LOW) % 3 for port in picked} == {index}
        assert all(ports.PICK_PORT_LOW <= port < 32768 for port in picked)
