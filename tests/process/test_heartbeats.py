"""Heartbeats: a half-open link is declared down, a dead or mute client is closed,
a live but quiet client is kept. The guards are rules of the server, so they run on
the in-process bus under MockClock (a blackhole on the memory network is a path that
goes silent without FIN or RST; raw frames go over a memory stream); their seconds of
silence cost no wall time. One mute client over a real TCP socket to a real
`mrs serve` stays, the end-to-end check that the timers run in a process."""

from __future__ import annotations

import socket
import struct

import msgpack
import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma
from mrs import protocol as wire
from tests.process.test_links import QUEUES, wait_for_link

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
async def linked(request, make_mem_linked):
    """Two in-process groups; only group `request.param` has the short silence limit,
    so it notices on its own (a close by the other would reach it as a FIN, which a
    real half-open path never delivers)."""
    quick = request.param
    extras = {group: FAST_GUARDS if group == quick else SLOW_GUARDS for group in (1, 2)}
    bus = await make_mem_linked(queues=QUEUES, group_extras=extras)
    bus.quick = quick
    await wait_for_link(bus, 1, 2)
    return bus


async def test_a_half_open_link_is_declared_down_and_the_uma_runs(linked, caplog) -> None:
    proxy = linked.proxy(1, 2)
    async with linked.connect(1, "OUT") as sender:
        psb = await sender.put(b"before", target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
        assert psb.delivery_status == Status.STORED
        proxy.blackhole()  # no FIN, no RST: the peer just goes quiet
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
    noticed = "link to group 2" if linked.quick == 1 else "link from group 1"
    assert f"{noticed} declared down" in caplog.text  # the quick group, on its own

    proxy.heal()
    await wait_for_link(linked, 1, 2, "up", backlog=0)
    async with linked.connect(2, "IN") as receiver:
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
async def guarded_bus(make_mem_bus):
    return await make_mem_bus(group_extra=FAST_GUARDS)


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


async def _memory_stream(bus, node: str = "clients") -> trio.abc.Stream:
    """A raw byte stream to the in-process group from memory-network node `node`."""
    host, port = bus.address.rsplit(":", 1)
    return await bus.memory.network.node(node).connect(host, int(port))


def _decode_frames(buffer: bytes) -> list:
    frames = []
    while len(buffer) >= 4:
        size = struct.unpack(">I", buffer[:4])[0]
        frames.append(msgpack.unpackb(buffer[4 : 4 + size]))
        buffer = buffer[4 + size :]
    return frames


def _read_until_closed(sock: socket.socket) -> list:
    """Every frame (as a decoded list) the server sends until it closes; answers
    nothing, like a mute or vanished peer."""
    buffer = b""
    while data := sock.recv(65536):
        buffer += data
    return _decode_frames(buffer)


async def _receive_until_closed(stream: trio.abc.Stream) -> list:
    """`_read_until_closed` on a memory stream."""
    buffer = b""
    with trio.fail_after(ANSWER_S_MAX):
        try:
            while data := await stream.receive_some(65536):
                buffer += data
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    return _decode_frames(buffer)


async def test_a_client_that_never_answers_pings_is_closed(make_bus) -> None:
    """Over a real socket to a real process: the heartbeat timers run there too."""
    process_bus = make_bus(group_extra=FAST_GUARDS)

    def mute_client() -> list:
        with _raw_connect(process_bus.address) as sock:
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
    assert "closing connection (TIMEOUT): nothing heard" in process_bus.log_text()


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
    stream = await _memory_stream(guarded_bus)
    await stream.send_all(sends)
    frames = await _receive_until_closed(stream)
    assert frames[-1][0] == wire.Fatal.code and frames[-1][1] == Status.TIMEOUT
    assert reason in frames[-1][2]
    async with guarded_bus.connect("ORDERS") as still_serving:
        assert (await still_serving.status())["queues"]["1.10"]["pending"] == 0


async def test_a_frame_dripped_byte_by_byte_is_cut_at_the_frame_deadline(
    guarded_bus, caplog
) -> None:
    """Slowloris: bytes keep coming, so the connection is not idle, but the frame
    never completes within frame_s_max."""
    hello = wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "slow"))

    async def slow_client() -> str:
        stream = await _memory_stream(guarded_bus)
        await stream.send_all(hello + struct.pack(">I", 1000))
        for _ in range(200):  # 20 s of dripping at most
            try:
                await stream.send_all(b"\x00")
                with trio.move_on_after(0.1):
                    if await stream.receive_some(65536) == b"":
                        return "closed"
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return "closed"
        return "still open"

    started = trio.current_time()
    outcome = await slow_client()
    assert outcome == "closed"
    assert trio.current_time() - started < ANSWER_S_MAX
    assert "frame stayed unfinished" in caplog.text


async def test_a_vanished_client_frees_its_queue(guarded_bus) -> None:
    """A client behind a path that goes silent (no FIN) is closed by the server, so
    its queue can be attached again and its unconfirmed message is redelivered."""
    network = guarded_bus.memory.network
    async with guarded_bus.connect("SENDER") as sender:
        await sender.put(b"work", target="1.11", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
    doomed_seq = None
    doomed_node = network.node("doomed")  # its own path to the group, to blackhole
    async with guarded_bus.connect("ANYORDER", open_stream=doomed_node.connect) as doomed:
        message = await doomed.get(timeout=10)
        doomed_seq = message.seq
        network.blackhole("doomed", "g1")
        with trio.fail_after(ANSWER_S_MAX):
            while True:
                try:
                    async with guarded_bus.connect("ANYORDER") as heir:
                        again = await heir.get(timeout=10)
                        break
                except MrsError as error:
                    assert error.status == Status.QUEUE_BUSY
                    await trio.sleep(0.1)
    assert again.seq == doomed_seq
    assert again.delivery_status == Status.POSSDUPL
