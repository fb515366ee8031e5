"""Links to and between replicated groups across their failovers, as real processes:
one etcd, three `mrs serve --instance` processes per replicated group, SIGKILL.

What a linked group depends on: whichever instance of a replicated peer is active,
its link finds it within about a lease once that instance is active, wherever the
lost one went (a process that died, or a machine that vanished and answers nothing
at its address), and every message it acknowledged arrives once, in order.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import trio

from clients import (
    DeliveryMode,
    MrsTimeout,
    NoMoreMessages,
    Status,
    Uma,
    connect,
    instance_addresses,
)
from mrs import protocol as wire
from mrs.group.link_driver import PEER_STARTING
from sim.etcd import wait_active
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2


def _instances(names: str) -> str:
    return "".join(
        f'[[group.instance]]\nname = "{name}"\nlisten = "127.0.0.1:{free_port()}"\n'
        f'replication = "127.0.0.1:{free_port()}"\ndata_dir = "{name}"\n'
        for name in names
    )


def _bus(etcd_endpoint: str, directory: Path, nyc: str, ldn: str) -> Path:
    """A bus of NYC (group 1) and LDN (group 2), linked; `nyc` / `ldn` are the
    instance names of a replicated group, or "" for a plain group."""
    text = (
        f'[coordinator]\netcd = ["{etcd_endpoint}"]\nlease_ttl_s = {LEASE_TTL_S}\n'
        f'prefix = "/mrs/{directory.name}"\n\n'
    )
    for group_id, name, instances in ((1, "NYC", nyc), (2, "LDN", ldn)):
        text += f'[[group]]\nid = {group_id}\nname = "{name}"\n'
        if instances:
            text += _instances(instances)
        else:
            text += f'listen = "127.0.0.1:0"\ndata_dir = "g{group_id}"\n'
        text += STANDARD_QUEUES
    path = directory / "bus.toml"
    path.write_text(text + "[[link]]\ngroups = [1, 2]\n")
    return path


async def _link(address: str | list[str], peer: int) -> dict:
    async with connect(address, None) as client:
        return (await client.status())["links"][str(peer)]


async def _wait_link_up(address: str | list[str], peer: int, within_s: float = WAIT_S) -> float:
    """Poll a group's status until its link to `peer` is up with no SAF backlog
    (another process's state: no event to await); the seconds it took."""
    started = trio.current_time()
    with trio.fail_after(within_s):
        while True:
            link = await _link(address, peer)
            if link["state"] == "up" and link["saf_backlog"] == 0:
                return trio.current_time() - started
            await trio.sleep(0.05)


@contextlib.contextmanager
def _vanished(address: str) -> Iterator[None]:
    """`address` as a machine that vanished: nothing refuses a connection there (no
    RST), a SYN is never answered. A listener with a backlog of one that never
    accepts, its backlog filled: the kernel drops every further SYN."""
    host, port = address.rsplit(":", 1)
    listener = socket.socket()
    filler = socket.socket()
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, int(port)))
        listener.listen(0)
        filler.connect((host, int(port)))
        yield
    finally:
        filler.close()
        listener.close()


async def _take_all(addresses: list[str], queue: str) -> list[tuple[bytes, int]]:
    """Every message waiting on `queue`, confirmed: (body, delivery status)."""
    taken: list[tuple[bytes, int]] = []
    async with connect(addresses, queue) as client:
        while True:
            try:
                message = await client.get(timeout=3)
            except (NoMoreMessages, MrsTimeout):
                return taken
            taken.append((message.body, int(message.delivery_status)))
            await client.confirm(message.seq)


def test_a_link_finds_the_new_active_when_the_lost_one_answers_nothing(etcd, tmp_path) -> None:
    """Group 2's active vanishes as a machine does (its address drops every SYN: no
    RST) and a replica takes over. Before, group 1's link dialed the lost active's
    address first at every redial, as the one that answered last, and waited there
    for the whole handshake timeout: it never tried the new active, and group 1's SAF
    grew for ever (the link stayed down long after group 2 was back). Now a dial
    that is not answered at once goes on to the next instance: the link is up within
    a few seconds of the new active, and the message put meanwhile arrives."""
    config = _bus(etcd.endpoint, tmp_path, "", "abc")
    instances = {name: InstanceProcess(config, name, group_id=2) for name in "abc"}
    nyc = GroupProcess(config, 1)
    addresses = instance_addresses(config, "LDN")
    try:
        for process in instances.values():
            process.start()
        old = wait_active(instances, WAIT_S)
        nyc_address = nyc.start()
        trio.run(_wait_link_up, nyc_address, 2)
        instances[old].kill()
        with _vanished(addresses["abc".index(old)]):
            rest = {name: p for name, p in instances.items() if name != old}
            wait_active(rest, WAIT_S)
            trio.run(_put_then_take, nyc_address, addresses)
    finally:
        nyc.terminate()
        for process in instances.values():
            process.terminate()


async def _put_then_take(nyc_address: str, ldn_addresses: list[str]) -> None:
    """A WF_SAF put in group 1 reaches group 2's new active soon after it is active."""
    async with connect(nyc_address, "SENDER") as sender:
        psb = await sender.put(b"after", "2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
    took_s = await _wait_link_up(nyc_address, 2, within_s=15)
    assert took_s < 10, took_s
    assert [body for body, _ in await _take_all(ldn_addresses, "ORDERS")] == [b"after"]


def _plain_bus(directory: Path, peer_port: int) -> Path:
    """Plain group 1 (NYC) linked to group 2 (LDN) at `peer_port`: a stand-in there
    answers as a replicated group's new active does while it starts."""
    text = ""
    for group_id, name, port in ((1, "NYC", 0), (2, "LDN", peer_port)):
        text += (
            f'[[group]]\nid = {group_id}\nname = "{name}"\nlisten = "127.0.0.1:{port}"\n'
            f'data_dir = "g{group_id}"\n{STANDARD_QUEUES}'
        )
    path = directory / "bus.toml"
    path.write_text(text + "[[link]]\ngroups = [1, 2]\n")
    return path


def _wait_logged(path: Path, text: str) -> None:
    """A log line is the only trace of the dialer's backoff: polled every 10 ms."""
    deadline = time.monotonic() + WAIT_S
    while text not in path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"no {text!r} in {path}"
        time.sleep(0.01)


async def _new_active_stand_in(port: int, nyc_address: str) -> float:
    """Refuse the first link Hello as a starting new active does, welcome the next;
    the seconds from the refusal until group 1's link is up."""
    hellos = 0
    refused_at = 0.0

    async def serve(stream: trio.SocketStream) -> None:
        nonlocal hellos, refused_at
        connection = wire.Connection("server")
        while not (events := connection.events()):
            connection.receive_data(await stream.receive_some(65536))
        assert isinstance(events[0], wire.Hello), events
        hellos += 1
        if hellos == 1:
            refusal = f"group 2 {PEER_STARTING}"
            await stream.send_all(connection.send(wire.Fatal(int(Status.LINK_DOWN), refusal)))
            refused_at = trio.current_time()
            return
        welcome = wire.Welcome(wire.PROTOCOL_VERSION, 2, "LDN", 1 << 20, b"\x01" * 16)
        await stream.send_all(connection.send(welcome))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(trio.serve_tcp, serve, port, host="127.0.0.1"))
        while hellos == 0:
            await trio.sleep(0.01)
        with trio.fail_after(WAIT_S):
            while (await _link(nyc_address, 2))["state"] != "up":
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    return trio.current_time() - refused_at


def test_a_link_refused_by_a_starting_active_dials_again_at_once(tmp_path) -> None:
    """Group 2 was gone long enough for group 1's redial backoff to reach its cap
    (2 s); its new active refuses the first Hello (`group 2 is starting`: its first
    records are not on a replica yet, a few milliseconds). Before, group 1 waited the
    whole capped backoff before the next dial: at every failover of a replicated peer
    the link stayed down 2 s more than the peer needed (WF_DQF puts answered
    LINK_DOWN, the SAF growing). Now it dials again at once: up within half a second."""
    peer_port = free_port()
    config = _plain_bus(tmp_path, peer_port)
    nyc = GroupProcess(config, 1)
    try:
        nyc_address = nyc.start()
        _wait_logged(tmp_path / "group1.log", "retrying in 2.00 s")
        took_s = trio.run(_new_active_stand_in, peer_port, nyc_address)
        assert took_s < 0.5, took_s
    finally:
        nyc.terminate()
