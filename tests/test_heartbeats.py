"""Heartbeats: a half-open link is declared down, a dead or mute client is closed,
a live but quiet client is kept (real processes, a real blackholing proxy)."""

from __future__ import annotations

import socket
import struct

import msgpack
import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect
from mrs import protocol as wire
from sim.bus import LinkedBus
from sim.proxy import FaultProxy, free_port
from tests.test_links import QUEUES, wait_for_link

HEARTBEAT_S = 0.2
SILENCE_S = 1.5
FAST_GUARDS = f"""
[group.guards]
heartbeat_interval_s = {HEARTBEAT_S}
link_silence_s_max = {SILENCE_S}
client_idle_s_max = {SILENCE_S}
handshake_s_max = 1.0
frame_s_max = 1.0
"""
HELLO = wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "raw"))
ANSWER_S_MAX = 15.0
"""Generous: the machine is shared; without heartbeats the answer never comes."""


SLOW_GUARDS = FAST_GUARDS.replace(f"link_silence_s_max = {SILENCE_S}", "link_silence_s_max = 8.0")


@pytest.fixture(params=[1, 2], ids=["dialer-notices", "acceptor-notices"])
async def linked(request, tmp_path, nursery):
    """Two groups through a proxy; only group `request.param` has the short silence
    limit, so it notices on its own (a close by the other would reach it as a FIN
    through the proxy, which a real half-open path never delivers)."""
    quick = request.param
    extras = {group: FAST_GUARDS if group == quick else SLOW_GUARDS for group in (1, 2)}
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, group_extras=extras)
    bus.quick = quick
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    await wait_for_link(bus, 1, 2)
    yield bus
    bus.stop()


async def test_a_half_open_link_is_declared_down_and_the_uma_runs(linked) -> None:
    proxy = linked.proxy(1, 2)
    async with connect(linked.address(1), "OUT") as sender:
        psb = await sender.put(b"before", target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
        assert psb.delivery_status == Status.STORED
        proxy.blackhole("forward")
        proxy.blackhole("backward")  # no FIN, no RST: the peer just goes quiet
        started = trio.current_time()
        with trio.fail_after(ANSWER_S_MAX):
            during = await sender.put(
                b"during", target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF, timeout=60
            )
        # in flight when the link died: kept in the SAF, not a TIMEOUT
        assert during.delivery_status == Status.SAF_FORCED
        assert trio.current_time() - started < ANSWER_S_MAX
        await wait_for_link(linked, 1, 2, "down")
        await wait_for_link(linked, 2, 1, "down")  # the acceptor noticed it too
        after = await sender.put(
            b"after", target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF, timeout=60
        )
        assert after.delivery_status == Status.SAF_FORCED  # in order, behind "during"
        memory = await sender.put(
            b"memory", target="2.10", delivery=DeliveryMode.WF_MEM, uma=Uma.DISC, timeout=60
        )
        assert (memory.delivery_status, memory.uma_status) == (
            Status.LINK_DOWN,
            Status.DISC_SUCCESS,
        )
    assert "declared down" in (linked.directory / f"group{linked.quick}.log").read_text()

    proxy.heal()
    await wait_for_link(linked, 1, 2, "up", backlog=0)
    async with connect(linked.address(2), "IN") as receiver:
        bodies = []
        with trio.fail_after(ANSWER_S_MAX):
            while len(bodies) < 3:
                message = await receiver.get(timeout=ANSWER_S_MAX)
                bodies.append(message.body)
                await receiver.confirm(message.seq)
        assert bodies == [b"before", b"during", b"after"]
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)


@pytest.fixture
def guarded_bus(make_bus):
    return make_bus(group_extra=FAST_GUARDS)


async def test_a_quiet_client_that_answers_pings_is_kept(make_mem_bus) -> None:
    """In process under MockClock: the 4.5 s of quiet cost no wall time."""
    guarded_bus = await make_mem_bus(group_extra=FAST_GUARDS)
    async with guarded_bus.connect("ORDERS") as consumer:
        async with trio.open_nursery() as nursery:
            got: list = []

            async def wait_long() -> None:
                got.append(await consumer.get(timeout=None))

            nursery.start_soon(wait_long)
            await trio.sleep(SILENCE_S * 3)  # quiet for twice the idle limit
            async with guarded_bus.connect("SENDER") as sender:
                await sender.put(b"late", target="1.10", delivery=DeliveryMode.WF_MEM)
        assert got[0].body == b"late"


def _raw_connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=ANSWER_S_MAX)


def _read_until_closed(sock: socket.socket) -> list:
    """Every frame (as a decoded list) the server sends until it closes; answers
    nothing, like a mute or vanished peer."""
    buffer = b""
    while data := sock.recv(65536):
        buffer += data
    frames = []
    while len(buffer) >= 4:
        size = struct.unpack(">I", buffer[:4])[0]
        frames.append(msgpack.unpackb(buffer[4 : 4 + size]))
        buffer = buffer[4 + size :]
    return frames


async def test_a_client_that_never_answers_pings_is_closed(guarded_bus) -> None:
    def mute_client() -> list:
        with _raw_connect(guarded_bus.address) as sock:
            sock.sendall(wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "mute")))
            return _read_until_closed(sock)

    started = trio.current_time()
    frames = await trio.to_thread.run_sync(mute_client)
    elapsed = trio.current_time() - started
    codes = [frame[0] for frame in frames]
    assert codes[0] == wire.Welcome.code
    assert wire.Ping.code in codes  # it was asked, and said nothing
    assert frames[-1][0] == wire.Fatal.code and frames[-1][1] == Status.TIMEOUT
    assert SILENCE_S <= elapsed < ANSWER_S_MAX
    assert "closing connection (TIMEOUT): nothing heard" in guarded_bus.log_text()


@pytest.mark.parametrize(
    "sends, reason",
    [
        (b"", "no handshake"),
        (HELLO + b"\x00\x00", "frame stayed unfinished"),  # half a header, never the rest
    ],
    ids=["no-hello", "half-a-frame"],
)
async def test_handshake_and_frame_deadlines_close_the_connection(
    guarded_bus, sends, reason
) -> None:
    def idle_client() -> list:
        with _raw_connect(guarded_bus.address) as sock:
            sock.sendall(sends)
            return _read_until_closed(sock)

    frames = await trio.to_thread.run_sync(idle_client)
    assert frames[-1][0] == wire.Fatal.code and frames[-1][1] == Status.TIMEOUT
    assert reason in frames[-1][2]
    assert guarded_bus.process.running


async def test_a_frame_dripped_byte_by_byte_is_cut_at_the_frame_deadline(guarded_bus) -> None:
    """Slowloris: bytes keep coming, so the connection is not idle, but the frame
    never completes within frame_s_max."""
    hello = wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "slow"))
    def slow_client() -> str:
        with _raw_connect(guarded_bus.address) as sock:
            sock.sendall(hello + struct.pack(">I", 1000))
            sock.settimeout(0.1)
            for _ in range(200):  # 20 s of dripping at most
                try:
                    sock.sendall(b"\x00")
                    if sock.recv(65536) == b"":
                        return "closed"
                except TimeoutError:
                    continue
                except OSError:
                    return "closed"
            return "still open"

    started = trio.current_time()
    outcome = await trio.to_thread.run_sync(slow_client)
    assert outcome == "closed"
    assert trio.current_time() - started < ANSWER_S_MAX
    assert "frame stayed unfinished" in guarded_bus.log_text()


async def test_a_vanished_client_frees_its_queue(guarded_bus, nursery) -> None:
    """A client behind a path that goes silent (no FIN) is closed by the server, so
    its queue can be attached again and its unconfirmed message is redelivered."""
    port = int(guarded_bus.address.rsplit(":", 1)[1])
    proxy = FaultProxy(free_port(), port)
    await nursery.start(proxy.run)
    async with connect(guarded_bus.address, "SENDER") as sender:
        await sender.put(b"work", target="1.11", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
    doomed_seq = None
    async with connect(f"127.0.0.1:{proxy.listen_port}", "ANYORDER") as doomed:
        message = await doomed.get(timeout=10)
        doomed_seq = message.seq
        proxy.blackhole("forward")
        proxy.blackhole("backward")
        with trio.fail_after(ANSWER_S_MAX):
            while True:
                try:
                    async with connect(guarded_bus.address, "ANYORDER") as heir:
                        again = await heir.get(timeout=10)
                        break
                except MrsError as error:
                    assert error.status == Status.QUEUE_BUSY
                    await trio.sleep(0.1)
    assert again.seq == doomed_seq
    assert again.delivery_status == Status.POSSDUPL
