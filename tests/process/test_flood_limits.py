"""Bounds against one client growing server memory: each limit answers its status, logs
a line, and spares everyone else (real `mrs serve` processes and real sockets for the
per-connection and per-peer limits and RSS; the queue and connection byte caps, rules
a client sees, on the in-process bus)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
from pathlib import Path

import msgpack
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import DeliveryMode, MrsError, Status, Uma, connect
from mrs import protocol as wire
from mrs.config.bus import ConfigError, parse_config
from mrs.config.guards import GUARD_KEYS, Guards, parse_guards

MODE = DeliveryMode
BODY = b"x" * 30_000
QUEUED = (Status.UNATTACHEDQ, Status.ENQUEUED)
"""ENQUEUED while the server has not yet seen a receiver's close."""


def guards(**values: object) -> str:
    return "[group.guards]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def _accept_queue_length(port: int) -> int:
    """Connections waiting in the kernel for the listener on `port` to accept them
    (a listening socket's rx_queue in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        if local_port == port and fields[3] == "0A":  # 0A: LISTEN
            return int(fields[4].split(":")[1], 16)
    raise AssertionError(f"no listener on port {port}")


async def _all_accepted(address: str) -> None:
    """Return once the server has accepted every connection made to it so far: their
    tasks then start (and take their handshake slots) before any later connection's."""
    port = int(address.rsplit(":", 1)[1])
    with trio.fail_after(10):
        while _accept_queue_length(port):
            await trio.sleep(0.01)


def _raw(address: str, payload: bytes, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.settimeout(15)
    sock.bind((source, 0))
    sock.connect(_address(address))
    sock.sendall(payload)
    return sock


def _frames(sock: socket.socket, count: int) -> list:
    """Read `count` frames (decoded lists), or fewer if the server closes."""
    buffer, frames = b"", []
    while len(frames) < count:
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
            size = struct.unpack(">I", buffer[:4])[0]
            frames.append(msgpack.unpackb(buffer[4 : 4 + size]))
            buffer = buffer[4 + size :]
        if len(frames) >= count:
            break
        try:
            data = sock.recv(65536)
        except ConnectionResetError:  # a refused connection may be closed with RST
            break
        if not data:
            break
        buffer += data
    return frames[:count]


def _requests(*events: object) -> bytes:
    client = wire.Connection("client")
    return client.send_many([wire.Hello(wire.PROTOCOL_VERSION, "raw"), *events])


def _misbehaving_frame(event: object) -> bytes:
    """One frame for `event` from a fresh client: past the checks of the client that
    sent the others (its Connection refuses e.g. a request id still in flight)."""
    client = wire.Connection("client")
    client.send(wire.Hello(wire.PROTOCOL_VERSION, "raw"))
    return client.send(event)


def test_parked_gets_are_capped_per_connection(make_bus) -> None:
    bus = make_bus(group_extra=guards(parked_gets_max=3))
    gets = [wire.Get(request_id, -1) for request_id in range(2, 7)]
    with _raw(bus.address, _requests(wire.Attach(1, "ORDERS"), *gets)) as sock:
        welcome, attached, *refusals = _frames(sock, 4)
    assert welcome[0] == wire.Welcome.code and attached[0] == wire.Attached.code
    # gets 2, 3, 4 parked; 5 and 6 refused at once
    assert [(frame[0], frame[1], frame[2]) for frame in refusals] == [
        (wire.Failure.code, 5, Status.EXCEEDQUOTA),
        (wire.Failure.code, 6, Status.EXCEEDQUOTA),
    ]
    assert "parked_gets_max=3" in refusals[0][3]
    assert "request refused (EXCEEDQUOTA)" in bus.log_text()


def test_requests_in_flight_are_capped_per_connection(make_bus) -> None:
    bus = make_bus(group_extra=guards(requests_in_flight_max=4))
    gets = [wire.Get(request_id, 60_000) for request_id in range(2, 8)]
    with _raw(bus.address, _requests(wire.Attach(1, "ORDERS"), *gets)) as sock:
        _, _, first, second = _frames(sock, 4)
    # Attach was answered (no longer in flight): gets 2..5 wait, 6 and 7 are refused
    assert (first[1], first[2]) == (6, Status.EXCEEDQUOTA)
    assert (second[1], second[2]) == (7, Status.EXCEEDQUOTA)
    assert "requests_in_flight_max=4" in first[3]


def test_a_reused_request_id_in_flight_is_a_protocol_error(make_bus) -> None:
    bus = make_bus()
    payload = _requests(wire.Attach(1, "ORDERS"), wire.Get(2, -1))
    payload += _misbehaving_frame(wire.Get(2, -1))
    with _raw(bus.address, payload) as sock:
        *_, fatal = _frames(sock, 3)
    assert fatal[0] == wire.Fatal.code and fatal[1] == Status.PROTOCOL_ERROR
    assert "reused while in flight" in fatal[2]


def test_headers_that_would_not_fit_a_delivery_are_refused_and_the_group_goes_on(
    make_bus,
) -> None:
    """Headers filling a put's frame (a 1.1 MB value, the body tiny) were stored; the
    delivery of that message was larger than any frame, and the group stopped with
    LocalProtocolError at the reader's get, again after every restart. Headers are
    bounded (HEADERS_BYTES_MAX, encoded): over it MSGTOOBIG, under it delivered."""
    from clients import MessageTooBig
    from mrs.limits import HEADERS_BYTES_MAX

    bus = make_bus()

    async def run() -> None:
        async with connect(bus.address, "SENDER") as sender:
            with pytest.raises(MessageTooBig, match=f"exceed {HEADERS_BYTES_MAX}"):
                await sender.put(
                    b"body", "ANYORDER", delivery=MODE.WF_DQF, headers={"blob": "x" * 1_113_750}
                )
            kept = {"blob": "y" * (HEADERS_BYTES_MAX - 100)}
            psb = await sender.put(b"fits", "ANYORDER", delivery=MODE.WF_DQF, headers=kept)
            assert psb.delivery_status == Status.STORED
        async with connect(bus.address, "ANYORDER") as reader:
            message = await reader.get(timeout=5)
            assert (message.body, message.headers["blob"]) == (b"fits", kept["blob"])
            await reader.confirm(message.seq)
            assert (await reader.status())["group"] == 1

    trio.run(run)
    assert "Traceback" not in bus.log_text()


async def test_memory_queue_bytes_are_capped(make_mem_bus, caplog) -> None:
    bus = await make_mem_bus(group_extra=guards(queue_bytes_max=100_000))
    async with bus.connect("SENDER") as sender:
        statuses = []
        for _ in range(4):
            psb = await sender.put(BODY, target="1.11", delivery=MODE.WF_MEM, uma=Uma.DISC)
            statuses.append((psb.delivery_status, psb.uma_status))
        assert statuses[:3] == [(Status.UNATTACHEDQ, Status.NO_UMA)] * 3
        assert statuses[3] == (Status.EXCEEDQUOTA, Status.DISC_SUCCESS)
        async with bus.connect("ANYORDER") as receiver:
            await receiver.get(timeout=5)  # frees 30,000 bytes
        psb = await sender.put(BODY, target="1.11", delivery=MODE.WF_MEM, uma=Uma.DISC)
        assert psb.delivery_status in QUEUED
    assert "queue_bytes_max=100000" in caplog.text


async def test_connection_bytes_are_capped_and_other_connections_go_on(
    make_mem_bus, caplog
) -> None:
    bus = await make_mem_bus(group_extra=guards(connection_bytes_max=100_000))
    async with bus.connect("SENDER") as greedy:
        for target in ("1.11", "1.12", "1.11"):
            psb = await greedy.put(BODY, target=target, delivery=MODE.WF_MEM, uma=Uma.DISC)
            assert psb.delivery_status == Status.UNATTACHEDQ
        with pytest.raises(MrsError) as refused:
            await greedy.put(BODY, target="1.12", delivery=MODE.WF_MEM, uma=Uma.DISC)
        assert refused.value.status == Status.EXCEEDQUOTA
        async with bus.connect("SENDER2") as modest:
            psb = await modest.put(BODY, target="1.12", delivery=MODE.WF_MEM, uma=Uma.DISC)
            assert psb.delivery_status == Status.UNATTACHEDQ
        async with bus.connect("ANYORDER") as receiver:
            await receiver.get(timeout=5)  # one of greedy's messages leaves memory
        psb = await greedy.put(BODY, target="1.12", delivery=MODE.WF_MEM, uma=Uma.DISC)
        assert psb.delivery_status in QUEUED
    assert "connection_bytes_max=100000" in caplog.text


def _status(address: str) -> dict:
    with _raw(address, _requests(wire.StatusRequest(1)), source="127.0.0.3") as sock:
        return _frames(sock, 2)[1][2]


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(10) == b""
    except ConnectionResetError:  # closed with our Hello unread: RST instead of FIN
        return True


def _welcomed(sock: socket.socket) -> int:
    """The code of the first frame the server sends on a fresh connection."""
    frames = _frames(sock, 1)
    return frames[0][0] if frames else 0


def test_accept_rate_is_limited_per_peer_address(make_bus) -> None:
    bus = make_bus(group_extra=guards(accepts_per_s=0.01, accept_burst=5))
    hello = _requests()
    held = [_raw(bus.address, hello) for _ in range(5)]
    try:
        assert [_welcomed(sock) for sock in held] == [wire.Welcome.code] * 5
        with _raw(bus.address, hello) as refused:
            frame = _frames(refused, 1)[0]
            assert frame[0] == wire.Fatal.code and frame[1] == Status.EXCEEDQUOTA
            assert "accepts_per_s" in frame[2]
            assert _closed(refused)
        answered = 0
        for _ in range(5):  # within about a second: closed, at most one more answer
            try:
                with _raw(bus.address, hello) as flooding:
                    answered += len(_frames(flooding, 1))
            except ConnectionResetError:  # reset before connect() returned: no answer
                pass
        assert answered <= 1
        with _raw(bus.address, hello, source="127.0.0.2") as other_peer:
            assert _welcomed(other_peer) == wire.Welcome.code
    finally:
        for sock in held:
            sock.close()
    assert "connection refused (EXCEEDQUOTA)" in bus.log_text()
    assert _status(bus.address)["guards"]["refused"]["accept"] == 6


async def test_open_connections_are_capped_per_peer_address(make_bus) -> None:
    bus = make_bus(group_extra=guards(connections_per_peer_max=3))
    hello = _requests()
    held = [_raw(bus.address, hello) for _ in range(3)]
    assert [_welcomed(sock) for sock in held] == [wire.Welcome.code] * 3
    with _raw(bus.address, hello) as refused:
        frame = _frames(refused, 1)[0]
        assert (frame[0], frame[1]) == (wire.Fatal.code, Status.EXCEEDQUOTA)
        assert "connections_per_peer_max=3" in frame[2]
    held.pop().close()
    with trio.fail_after(15):  # the server notices the close, then has room again
        # (meanwhile refusals come without a Fatal: one a second per peer is answered)
        while True:
            with _raw(bus.address, hello) as again:
                if _welcomed(again) == wire.Welcome.code:
                    break
            await trio.sleep(0.05)
    for sock in held:
        sock.close()


# -- the config table ---------------------------------------------------------------


def _group_with(guards_text: str) -> str:
    return (
        '[[group]]\nid = 1\nname = "G"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
        + guards_text
        + '[[group.queue]]\nid = 10\nname = "Q"\n'
    )


def test_defaults_when_the_table_is_absent(tmp_path) -> None:
    config = parse_config(_group_with(""), tmp_path / "bus.toml")
    assert config.group(1).guards == Guards()


@pytest.mark.parametrize(
    "text, key, problem",
    [
        ("heartbeat_interval_s = 0", "heartbeat_interval_s", "must be > 0"),
        ("frame_s_max = 1e9", "frame_s_max", "<= 86400"),
        ('handshake_s_max = "5"', "handshake_s_max", "must be a number"),
        ("parked_gets_max = 1.5", "parked_gets_max", "must be an integer"),
        ("queue_bytes_max = 0", "queue_bytes_max", "must be in 1.."),
        ("link_silence_s_max = 2\nheartbeat_interval_s = 5", "link_silence_s_max", "longer than"),
        ("heartbeat_s = 1", "heartbeat_s", "unknown key"),
    ],
)
def test_bad_guards_are_one_line_naming_the_key(tmp_path, text, key, problem) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_group_with(f"[group.guards]\n{text}\n"), tmp_path / "bus.toml")
    message = str(caught.value)
    assert "\n" not in message
    assert f"group[0].guards.{key}: " in message and problem in message


VALUES = st.one_of(
    st.integers(-(10**15), 10**15),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=5),
)


@settings(deadline=None)  # a table parse is quick; a loaded CI worker is not
@given(st.dictionaries(st.sampled_from(sorted(GUARD_KEYS)), VALUES, max_size=6))
def test_parse_guards_accepts_exactly_the_valid_tables(table) -> None:
    result = parse_guards(table)
    if isinstance(result, tuple):
        key, problem = result
        # the key at fault, or a default that a given heartbeat_interval_s outgrew
        assert key in table or "heartbeat_interval_s" in table
        assert problem
        return
    for key, value in table.items():
        got = getattr(result, key)
        assert got == value and not isinstance(value, bool | str)
        assert got > 0
    assert result.link_silence_s_max > result.heartbeat_interval_s
    assert result.client_idle_s_max > result.heartbeat_interval_s


def _rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_a_recoverable_backlog_keeps_a_bounded_share_of_bodies_in_memory(make_bus) -> None:
    """150 recoverable 1 MiB messages wait for a reader: the queue keeps at most 64 MiB
    of their bodies in memory (the rest are read back from the DQF at delivery).
    Measured here: +71 MiB with the bound, +208 MiB without it for 200 messages."""
    bus = make_bus(group_extra="", limits="journal_bytes_max = 1073741824")
    pid = bus.process.process.pid
    count, mib = 150, 1024 * 1024
    async with connect(bus.address, "SENDER") as sender:
        await sender.put(b"warm-up", target="1.12", delivery=MODE.WF_DQF, uma=Uma.DISC)
        before = _rss_mib(pid)
        next_index = iter(range(count))

        async def put_some() -> None:
            for index in next_index:
                psb = await sender.put(
                    bytes([index]) * mib, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC
                )
                assert psb.delivery_status == Status.STORED

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(put_some)
        grown = _rss_mib(pid) - before
    assert grown < 115, f"server RSS grew {grown:.0f} MiB holding {count} MiB of backlog"
    async with connect(bus.address, "ANYORDER") as receiver:
        seen = set()
        for _ in range(count):
            message = await receiver.get(timeout=10)
            assert len(message.body) == mib and message.body == message.body[:1] * mib
            seen.add(message.body[0])
            await receiver.confirm(message.seq)
    assert seen == set(range(count))


def _peak_rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _unfinished_frame(frame_bytes: int) -> bytes:
    """A Hello, then all but the last byte of a frame of `frame_bytes`."""
    header = struct.pack(">I", frame_bytes)
    return _requests() + header + b"\x92" * (frame_bytes - 1)


def _frames_now(sock: socket.socket) -> list:
    """The frames `sock` has received by now (without waiting for more)."""
    sock.setblocking(False)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (BlockingIOError, ConnectionResetError):
        pass
    frames = []
    while len(data) >= 4 and len(data) >= 4 + (size := struct.unpack(">I", data[:4])[0]):
        frames.append(msgpack.unpackb(data[4 : 4 + size]))
        data = data[4 + size :]
    return frames


def _evicted(address: str) -> int:
    return _status(address)["guards"]["refused"].get("partial_frames_bytes_max", 0)


async def test_unfinished_frames_are_bounded_in_all_and_their_memory_given_back(
    make_bus,
) -> None:
    """48 connections each send all but one byte of a maximal frame (53 MiB in all):
    past partial_frames_bytes_max the connection stalled longest is closed with
    EXCEEDQUOTA, the server's peak memory stays near the bound, its memory goes back
    once they close, and a client is served throughout. Measured before the bound:
    +53 MiB held, all of it still resident after the connections closed."""
    from mrs.group.link_session import FRAME_OVERHEAD_BYTES, TRANSFER_BYTES_MAX

    bound_mib, count = 8, 48
    bus = make_bus(group_extra=guards(partial_frames_bytes_max=bound_mib << 20))
    pid = bus.process.process.pid
    frame_bytes = max(1 << 20, TRANSFER_BYTES_MAX) + FRAME_OVERHEAD_BYTES
    payload = _unfinished_frame(frame_bytes)
    before = _rss_mib(pid)
    evicted_min = count - (bound_mib << 20) // frame_bytes
    socks = [await trio.to_thread.run_sync(_raw, bus.address, payload) for _ in range(count)]
    try:
        with trio.fail_after(30):  # until the server has read them all
            while _evicted(bus.address) < evicted_min:
                await trio.sleep(0.1)
        peak_grown = _peak_rss_mib(pid) - before
        held_bytes = _status(bus.address)["guards"]["unfinished_frame_bytes"]
        assert held_bytes <= bound_mib << 20, held_bytes
        fatals = [frame for sock in socks for frame in _frames_now(sock)[1:]]
        assert fatals, "no connection was told why it was closed"
        for fatal in fatals:  # a connection closed with bytes unread may see a reset
            assert (fatal[0], fatal[1]) == (wire.Fatal.code, Status.EXCEEDQUOTA), fatal
            assert "partial_frames_bytes_max=8388608" in fatal[2]
    finally:
        for sock in socks:
            sock.close()
    assert peak_grown < bound_mib + 24, f"peak RSS grew {peak_grown:.0f} MiB"
    assert "closing connection (EXCEEDQUOTA): unfinished frames hold" in bus.log_text()
    with trio.fail_after(10):  # until the server saw them close; it trims once a second
        while _status(bus.address)["guards"]["unfinished_frame_bytes"] or (
            (grown := _rss_mib(pid) - before) > 12
        ):
            await trio.sleep(0.2)
    async with connect(bus.address, "SENDER") as client:
        psb = await client.put(b"still served", target="1.11", delivery=MODE.WF_MEM)
        assert psb.status == Status.SUCCESS, (psb, grown)


def _connect_and_reset(address: str, count: int) -> None:
    """What a flood does most: connect from 127.0.0.2 and reset at once."""
    linger_rst = struct.pack("ii", 1, 0)
    for _ in range(count):
        with socket.socket() as sock:
            sock.bind(("127.0.0.2", 0))
            with contextlib.suppress(OSError):
                sock.connect(_address(address))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_rst)


def test_connections_reset_before_they_are_served_get_no_session(make_bus) -> None:
    """A connection its peer reset before the server took it is closed in the accept
    loop and counted: no task, no session, no admission token spent (so the flood does
    not lock its address out). The server is stopped while the flood connects, so
    every connection is reset before the server can take it; the kernel queues them."""
    bus = make_bus()
    pid = bus.process.process.pid
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    count = min(500, somaxconn // 2)  # under the listen backlog: the kernel queues them all
    assert _status(bus.address)["guards"]["gone_before_served"] == 0
    os.kill(pid, signal.SIGSTOP)
    try:
        _connect_and_reset(bus.address, count)
    finally:
        os.kill(pid, signal.SIGCONT)
    guards_now = _status(bus.address)["guards"]  # accepted in order: after the flood
    assert guards_now["gone_before_served"] == count, guards_now
    assert guards_now["refused"] == {}, guards_now
    with _raw(bus.address, _requests(wire.StatusRequest(1)), source="127.0.0.2") as sock:
        assert "guards" in _frames(sock, 2)[1][2]  # its address is still served


async def test_connections_that_never_say_hello_are_bounded_in_all(make_bus) -> None:
    """handshakes_max connections of any peers still at their handshake at once: a
    new one makes the oldest give way (told EXCEEDQUOTA), so silent connections
    from many addresses cannot pile up, nor lock a client out."""
    bus = make_bus(group_extra=guards(handshakes_max=3, handshake_s_max=2.0))
    silent = [
        await trio.to_thread.run_sync(_raw, bus.address, b"", f"127.0.0.{10 + index}")
        for index in range(3)
    ]
    await _all_accepted(bus.address)  # the silent ones are older than the client
    try:
        async with connect(bus.address, "SENDER", reconnect=None) as client:
            psb = await client.put(b"past the silent", target="1.11", delivery=MODE.WF_MEM)
            assert psb.status == Status.SUCCESS
        fatals = [(await trio.to_thread.run_sync(_frames, sock, 1))[0] for sock in silent]
    finally:
        for sock in silent:
            sock.close()
    # the one that gave way is told at once; the others when handshake_s_max ends
    statuses = sorted(fatal[1] for fatal in fatals)
    assert statuses == sorted([Status.EXCEEDQUOTA, Status.TIMEOUT, Status.TIMEOUT]), fatals
    gave_way = next(fatal for fatal in fatals if fatal[1] == Status.EXCEEDQUOTA)
    assert "handshakes_max=3" in gave_way[2]
    assert "the oldest gave way to a new connection (handshakes_max=3)" in bus.log_text()


async def test_a_client_that_asks_for_journal_pages_and_never_reads_them_is_bounded(
    make_bus,
) -> None:
    """2,000 ReadJournal requests fit in one 64 KiB read and each is answered with
    about a MiB of PCJ records: answered all at once, the server held 2 GiB for a
    client that never reads, and stalled everyone else while it read the pages. Its
    answers stop at OUTBOX_BYTES_HIGH until it reads; others are served meanwhile."""
    bus = make_bus(group_extra="pcj_default = true", limits="journal_bytes_max = 1073741824")
    pid = bus.process.process.pid
    body = b"J" * 1_000_000
    async with connect(bus.address, "SENDER") as sender:
        for _ in range(20):
            await sender.put(body, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DLJ)
    async with connect(bus.address, "ANYORDER") as receiver:
        for _ in range(20):
            await receiver.confirm((await receiver.get(timeout=10)).seq)
    before = _rss_mib(pid)
    pages = [wire.ReadJournal(request_id, "pcj", page_records=256) for request_id in range(2, 2002)]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(_address(bus.address))
    with sock:
        sock.sendall(_requests(*pages))
        async with connect(bus.address, None) as other:
            slowest_s = 0.0
            for _ in range(100):  # the pages are read meanwhile, if they are
                started_s = trio.current_time()
                await other.status()
                slowest_s = max(slowest_s, trio.current_time() - started_s)
        grown = _peak_rss_mib(pid) - before
    assert grown < 200, f"server RSS grew {grown:.0f} MiB for a client that does not read"
    assert slowest_s < 0.5, f"another client waited {slowest_s:.2f} s for its status"


async def test_a_flood_of_puts_whose_uma_fails_logs_one_line_not_one_each(
    make_mem_bus, caplog
) -> None:
    """UMA SAF towards the sender's own group cannot be taken: each put is answered
    SAF_FAILED, and the operator's log gets one line (with a count), not one per put."""
    bus = await make_mem_bus()
    async with bus.connect("SENDER") as sender:
        for _ in range(50):
            psb = await sender.put(b"x", target="1.999", delivery=MODE.WF_DQF, uma=Uma.SAF)
            assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.SAF_FAILED)
    lines = [r for r in caplog.records if "no SAF towards the sender's own group" in r.message]
    assert len(lines) == 1 and lines[0].levelname == "ERROR"


def test_a_peers_long_texts_are_clipped_in_answers_and_log_lines(make_bus) -> None:
    """A frame may carry MiBs of text: a queue name is answered, and a link's program
    name logged, with at most PEER_TEXT_CHARS_MAX of it (a 1 MB program name once
    wrote a 1 MB log line per connection)."""
    bus = make_bus()
    with _raw(bus.address, _requests(wire.Attach(1, "Q" * 100_000))) as sock:
        _, refusal = _frames(sock, 2)
    assert (refusal[0], refusal[2]) == (wire.Failure.code, Status.NOSUCHQUEUE)
    assert "has no queue named 'QQQ" in refusal[3] and len(refusal[3]) <= 300
    stranger = wire.Connection("client")
    hello = stranger.send(wire.Hello(wire.PROTOCOL_VERSION, "P" * 1_000_000, "link", 0))
    with _raw(bus.address, hello) as sock:
        fatal = _frames(sock, 1)
    assert fatal[0][0] == wire.Fatal.code and len(fatal[0][2]) <= 300
    refused = [line for line in bus.log_text().splitlines() if "refused link from" in line]
    assert refused and all(len(line) < 600 for line in refused)
