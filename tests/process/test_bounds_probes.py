"""Bounds found by probing a real `mrs serve`: every buffer and table that a peer can
make grow stays bounded, and a flood on one endpoint spares the group's clients (real
processes, real sockets, real LMDB files)."""

from __future__ import annotations

import contextlib
import resource
import socket
import struct

import pytest
import trio

from clients import DeliveryMode, MrsError, Uma, connect, instance_addresses
from mrs.config.bus import load_config
from mrs.group.peers import WAITERS_SWEEP_MIN
from mrs.limits import HTTP_CONNECTIONS_MAX, LINK_HANDSHAKE_TIMEOUT_S
from mrs.model import Status
from sim.etcd import wait_active
from sim.ports import free_port
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import etcd
from tests.process.test_flood_limits import _accept_queue_length
from tests.process.test_links import QUEUES as LINK_QUEUES
from tests.process.test_links import wait_for_link
from tests.process.test_replication import instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

SERVER_FILES_MAX = 256
"""The open-file limit the probed server is given: small, so a leak of sockets shows
as refused connections within a test's time, as 1,024 (a common default) does later."""


async def _backlog_at_most(port: int, waiting: int) -> None:
    """Return once at most `waiting` connections wait in the kernel's backlog of `port`
    (the server accepted the others)."""
    with trio.fail_after(10):
        while _accept_queue_length(port) > waiting:
            await trio.sleep(0.01)


async def _still_served(bus) -> None:
    """A client connects, puts and gets as usual, without waiting for parked
    connections to time out and give their descriptors back."""
    with trio.fail_after(HTTP_REQUEST_DEADLINE_LESS_S):
        async with bus.connect("SENDER") as sender:
            await sender.put(
                b"still served", target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
            )
        async with bus.connect("ANYORDER") as receiver:
            assert (await receiver.get(timeout=2)).body == b"still served"


async def test_idle_metrics_connections_wait_in_the_backlog_and_spare_clients(make_bus) -> None:
    """Connections to /metrics that never send a request used to be accepted without a
    bound and parked: 300 of them took every descriptor of a server limited to 256 and
    its clients' connects failed. Beyond HTTP_CONNECTIONS_MAX they now wait in the
    kernel's backlog, and a client connects, puts and gets as usual."""
    metrics_port = free_port()
    bus = make_bus(
        queues=f'[group.ops]\nmetrics_listen = "127.0.0.1:{metrics_port}"\n' + STANDARD_QUEUES
    )
    pid = bus.process.process.pid
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (SERVER_FILES_MAX, hard))
    idle_count = SERVER_FILES_MAX + 44
    with contextlib.ExitStack() as idle:
        for _ in range(idle_count):
            idle.enter_context(socket.create_connection(("127.0.0.1", metrics_port)))
        # the server has taken what it takes: the rest wait in the kernel's backlog
        await _backlog_at_most(metrics_port, idle_count - HTTP_CONNECTIONS_MAX)
        await _still_served(bus)
        assert _accept_queue_length(metrics_port) == idle_count - HTTP_CONNECTIONS_MAX


async def test_one_address_cannot_take_every_descriptor_from_the_others(make_bus) -> None:
    """300 idle connections from one address to a server limited to 256 descriptors
    used to take them all (connections_per_peer_max is 1,000): the accept loop failed
    with EMFILE ten times a second and no other client could connect. Now one address
    holds at most half of what the server keeps for connections; the rest are refused
    EXCEEDQUOTA, and a client from another address connects, puts and gets."""
    bus = make_bus(queues=STANDARD_QUEUES)
    pid = bus.process.process.pid
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (SERVER_FILES_MAX, hard))
    host, port = bus.address.rsplit(":", 1)
    with contextlib.ExitStack() as idle:
        for _ in range(SERVER_FILES_MAX + 44):
            flood = idle.enter_context(socket.socket())
            flood.bind(("127.0.0.2", 0))  # another address of this machine's loopback
            flood.connect((host, int(port)))
        await _backlog_at_most(int(port), 0)  # every one accepted (or refused and closed)
        await _still_served(bus)
    log = bus.log_text()
    assert "Too many open files" not in log
    assert "connection refused (EXCEEDQUOTA)" in log and "from 127.0.0.2" in log


HTTP_REQUEST_DEADLINE_LESS_S = 4.0
"""Less than HTTP_REQUEST_DEADLINE_S: the client must not have to wait for parked
connections to time out and give their descriptors back."""


def _closed_by_replica(conn: socket.socket, within_s: float) -> bool:
    """Whether the replica closed `conn` (EOF or reset) within `within_s`, reading
    and dropping whatever it sent first."""
    conn.settimeout(within_s)
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def test_a_replica_bounds_what_strangers_hold_before_their_hello(instances) -> None:
    """Before its hello a connection to the replication port is anyone's. A stranger
    that announced a 200 MiB hello and sent 30 MiB of it used to hold all of it in
    the replica's memory, and one that sent nothing held its socket, for ever and in
    any number (ten: 300 MB). Now a hello over HELLO_BYTES_MAX is refused from its
    length and one that does not come within LINK_HANDSHAKE_TIMEOUT_S is dropped;
    the group goes on replicating to that replica."""
    active = wait_active(instances, 30)
    replica = next(name for name in instances if name != active)
    config = instances[replica].config_path
    port = load_config(config).group(1).instance(replica).replication_port
    with (
        socket.create_connection(("127.0.0.1", port)) as huge,
        socket.create_connection(("127.0.0.1", port)) as silent,
    ):
        huge.sendall(struct.pack(">I", 200 << 20) + b"\0" * 1024)
        assert _closed_by_replica(huge, within_s=LINK_HANDSHAKE_TIMEOUT_S)
        assert _closed_by_replica(silent, within_s=LINK_HANDSHAKE_TIMEOUT_S + 5)

    async def put_then_caught_up() -> None:
        async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
            psb = await client.put(b"after", "ORDERS", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED
            await wait_caught_up(client, {"a", "b", "c"})

    trio.run(put_then_caught_up)


async def test_waiters_of_puts_whose_notice_never_comes_stay_bounded(make_mem_linked) -> None:
    """A WF_DEQ put to another group waits for that group's notice that the message
    was got. A restart there loses the memory message and the notice never comes: the
    put times out, but its entry in the sender's table of waiters (holding its reply
    and session) stayed for ever, one more per put and restart. Answered puts'
    entries are now swept, so the table stays bounded by the puts still waiting."""
    linked = await make_mem_linked(queues=LINK_QUEUES)
    await wait_for_link(linked, 1, 2)
    peer = linked.server(1).group.peers[2]
    puts_per_round = WAITERS_SWEEP_MIN
    for _ in range(3):
        async with linked.connect(1, "1.11") as sender:

            async def put_and_time_out() -> None:
                with pytest.raises(MrsError) as refused:
                    await sender.put(
                        b"lost",
                        target="2.10",
                        delivery=DeliveryMode.WF_DEQ,
                        uma=Uma.DISC,
                        timeout=1,
                    )
                assert refused.value.status == Status.TIMEOUT

            async with trio.open_nursery() as nursery:
                for _ in range(puts_per_round):
                    nursery.start_soon(put_and_time_out)
        await linked.restart(2)  # its memory messages are gone: no notice will come
        await wait_for_link(linked, 1, 2)
    assert len(peer.waiters) <= 2 * WAITERS_SWEEP_MIN
