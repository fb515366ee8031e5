"""The wire as a hostile or buggy peer would use it, against real `mrs serve` processes:
a link peer whose LinkAck names other seqs than the transfer sent (in another order,
twice, never sent), a client that parks gets and never reads their answers, and
frames of every event with fields of the wrong type or range (hypothesis), split at
any byte. Each is answered with a status and one line, or that one connection is
closed; nothing stored is lost and no traceback is logged."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import msgpack
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients import DeliveryMode, Status, Uma, connect_sync
from mrs import protocol as wire
from sim.bus import LinkedBus
from tests.process.test_link_probes import GUARDS, QUEUES, FakePeer
from tests.process.test_links import wait_for_link

# -- a link peer whose answers name other seqs ------------------------------------------

Lie = Callable[[list[int]], list[tuple[int, int]]]
"""The (seq, status) results a lying peer answers for a transfer of these seqs."""

_STORED, _BEHIND = int(Status.STORED), int(Status.LINK_DOWN)

LIES: dict[str, Lie] = {
    # it stored the first message and refused the others behind it, answered backwards
    "reversed": lambda seqs: [(seqs[0], _STORED), *((s, _BEHIND) for s in seqs[1:])][::-1],
    # the first message answered once for each message sent
    "twice": lambda seqs: [(seqs[0], _STORED)] * len(seqs),
    # seqs this group never sent, all stored
    "never-sent": lambda seqs: [(seq + 1000, _STORED) for seq in seqs],
}


def _lying_once(lie: Lie, honest: set[int]) -> Callable[[wire.LinkTransfer], list]:
    """Lie about the first transfer of several messages, then answer honestly (each
    honestly stored seq goes into `honest`)."""
    lied = False

    def answer(transfer: wire.LinkTransfer) -> list[wire.LinkResult]:
        nonlocal lied
        seqs = [message.seq for message in transfer.messages]
        if not lied and len(seqs) > 1:
            lied = True
            return [wire.LinkResult(seq, status, seq) for seq, status in lie(seqs)]
        honest.update(seqs)
        return [wire.LinkResult(seq, _STORED, seq) for seq in seqs]

    return answer


@pytest.mark.parametrize("lie", sorted(LIES))
async def test_a_link_ack_naming_other_seqs_is_a_protocol_error_and_loses_nothing(
    tmp_path, nursery, lie
) -> None:
    """The sender settled a transfer's messages by their place in the LinkAck, never
    looking at the seqs its results name: a peer that answered "313 stored, 314 and
    315 refused" backwards got 315 deleted from the SAF, a message it never stored
    (lost), and 313 sent again. Now an answer whose results do not name the sent
    seqs one per message, in order, is a protocol error: the link drops, every
    message stays in the SAF and is drained again."""
    honest: set[int] = set()
    peer = FakePeer(_lying_once(LIES[lie], honest))
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True, group_extra=GUARDS)
    await trio.to_thread.run_sync(bus.processes[1].start)
    try:
        async with bus.connect(1, "OUT") as sender:  # link down: all three wait in the SAF
            seqs = set()
            for body in (b"a", b"b", b"c"):
                psb = await sender.put(
                    body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC
                )
                assert psb.delivery_status == Status.STORED
                seqs.add(psb.seq)
        await nursery.start(peer.serve, bus.ports[2])
        await wait_for_link(bus, 1, 2, backlog=0)
    finally:
        bus.stop()
    assert [len(transfer.messages) for transfer in peer.transfers][0] == 3
    assert honest == seqs, "a message the peer did not store left the SAF"
    log = (bus.directory / "group1.log").read_text()
    assert "protocol error: LinkAck" in log and "Traceback" not in log


# -- a client that never reads ----------------------------------------------------------

UNREAD_BYTES_MAX = 4 * 1024 * 1024


def _frames_until_closed(sock: socket.socket) -> list:
    """Every frame the server sent on `sock` until it closed it (socket.timeout if it
    never does)."""
    buffer, frames = b"", []
    while True:
        try:
            data = sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        if not data:
            return frames
        buffer += data
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
            size = struct.unpack(">I", buffer[:4])[0]
            frames.append(msgpack.unpackb(buffer[4 : 4 + size]))
            buffer = buffer[4 + size :]


def _log_shows(bus, words: str, within_s: float) -> bool:
    """Whether the group's log says `words` within `within_s` (another process's log:
    polled)."""
    deadline_s = time.monotonic() + within_s
    while time.monotonic() < deadline_s:
        if words in bus.log_text():
            return True
        time.sleep(0.05)
    return False


def test_a_client_that_parks_gets_and_never_reads_is_closed_not_grown(make_bus) -> None:
    """The server stops reading a connection whose answers pass 8 MiB, but its gets
    parked before still took every message put meanwhile: 200 memory messages of
    1 MB grew the server by 200 MB for a client that parked 200 gets and read
    nothing, and it held them as long as it kept the connection (a thousand gets, a
    GB, by default). Now answers left unread beyond connection_bytes_max close that
    connection (EXCEEDQUOTA, one log line); others are served and lose nothing."""
    bus = make_bus(group_extra=f"[group.guards]\nconnection_bytes_max = {UNREAD_BYTES_MAX}\n")
    host, port = bus.address.rsplit(":", 1)
    lazy = socket.socket()
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lazy.settimeout(20)
    lazy.connect((host, int(port)))
    client = wire.Connection("client")
    gets = [wire.Get(2 + n, -1) for n in range(60)]
    lazy.sendall(
        client.send_many(
            [wire.Hello(wire.PROTOCOL_VERSION, "lazy"), wire.Attach(1, "ANYORDER"), *gets]
        )
        + client.send(wire.Ping(7))
    )
    _read_until_pong(lazy, client)  # every get is parked; from now on it reads nothing
    with (
        connect_sync(bus.address, "ORDERS") as keeper,
        connect_sync(bus.address, "SENDER") as sender,
    ):
        kept = keeper.put(b"kept", target="1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        for _ in range(40):
            sender.put(bytes(1_000_000), target="1.11", delivery=DeliveryMode.NN_MEM, uma=Uma.DISC)
        assert _log_shows(bus, "bytes of answers unread", within_s=10), bus.log_text()[-2000:]
        frames = _frames_until_closed(lazy)  # closed: EOF, not a timeout
        deliveries = [frame for frame in frames if frame[0] == wire.Delivery.code]
        assert len(deliveries) < 40
        assert sender.put(b"ok", target="1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC).seq
        message = keeper.get(timeout=5)
        assert (message.seq, message.body) == (kept.seq, b"kept")
    lazy.close()
    assert "Traceback" not in bus.log_text()
    assert "closing connection (EXCEEDQUOTA)" in bus.log_text()


def _read_until_pong(sock: socket.socket, client: wire.Connection) -> None:
    """Read the server's answers until its Pong (a Ping is answered in order, after
    every request sent before it was dispatched)."""
    while True:
        client.receive_data(sock.recv(65536))
        if any(isinstance(event, wire.Pong) for event in client.events()):
            return


# -- every event, each field wrong, split anywhere (hypothesis) ---------------------------

_PUT = [1, "1.11", b"x", 1, 1, 0, 0, 0, 0, b"", "", None]
VALID_FIELDS: dict[int, list] = {
    10: [1, "ORDERS"],
    12: _PUT,
    14: [1, 0, None],
    16: [1, 1, 0, 0],
    18: [1],
    20: [1],
    22: [[[12, *_PUT]]],
    23: [1, 2, 0, False, 0, None],
    25: [[1, 2]],
    27: [1, "ORDERS"],
    32: [1, ["ORDERS"]],
    60: [1, 0, False],
    62: [1, "pcj", -1, -1, -1, -1, [], [], [], [], [], 10],
    70: [1, "browse", {"queue": "ORDERS"}],
    1: [1, "again"],
    2: [1, 1, "x", 0],
    15: [1, 1, b"x", "1.1", "1.1", 0, 0, 0, 1, 1, b"", 0, None],
    40: [1, []],
    41: [1, [[1, 31, 1]]],
    42: [1, [["conf", 1, 1]]],
}
"""A valid field list for each event code (client requests, and events a client must
not send: a second Hello, server and link events)."""

WRONG = st.one_of(
    st.sampled_from([None, -1, 0, 2**63 - 1, 2**64 - 1, -(2**63), True, "", b"", [], {}]),
    st.sampled_from([float("nan"), float("inf"), 1.5, "x" * 70_000, "٣.١٠", [[[]]], {1: 2}]),
    st.sampled_from([{"reply_when_stored": 1}, {"idempotency_key": [1]}, [["priority", "<"]]]),
    st.sampled_from([{"dead_letter_header": "x"}, {"pass_context": {}}, {"queue": None}]),
)


@st.composite
def fuzzed_frames(draw: st.DrawFn) -> bytes:
    code = draw(st.sampled_from(sorted(VALID_FIELDS)))
    fields = list(VALID_FIELDS[code])
    for index in draw(st.lists(st.integers(0, len(fields) - 1), max_size=2)):
        fields[index] = draw(WRONG)
    fields = fields[: draw(st.integers(0, len(fields)))] if draw(st.booleans()) else fields
    payload = msgpack.packb([code, *fields], use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def _session(address: str, payload: bytes, cuts: list[int]) -> list:
    """Hello, Attach, `payload` and a Ping, written in pieces cut at `cuts`; the frames
    the server sent until its Pong, a Fatal or its close."""
    host, port = address.rsplit(":", 1)
    client = wire.Connection("client")
    start = client.send_many([wire.Hello(wire.PROTOCOL_VERSION, "fuzz"), wire.Attach(1, "ORDERS")])
    data = start + payload + client.send(wire.Ping(1))
    frames: list = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for begin, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            try:
                sock.sendall(data[begin:end])
            except (BrokenPipeError, ConnectionResetError):
                break  # closed after its Fatal: read that
        buffer = b""
        while not any(frame[0] in (wire.Fatal.code, wire.Pong.code) for frame in frames):
            try:
                received = sock.recv(1 << 20)
            except ConnectionResetError:
                break
            if not received:
                break
            buffer += received
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
                size = struct.unpack(">I", buffer[:4])[0]
                frames.append(msgpack.unpackb(buffer[4 : 4 + size], strict_map_key=False))
                buffer = buffer[4 + size :]
    return frames


def test_fuzzed_frames_split_anywhere_get_a_status_and_one_line(bus) -> None:
    """Every event with fields missing, of the wrong type, out of range, huge, NaN,
    nested, before or after the handshake, written in pieces cut anywhere: each is
    answered (a Failure with its status, not SERVER_ERROR) or refused with a one-line
    Fatal; the server goes on, keeps what it stored and logs no traceback."""
    with connect_sync(bus.address, "SENDER") as sender:
        kept = sender.put(b"kept", target="1.12", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)

    @settings(
        max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(payload=fuzzed_frames(), data=st.data())
    def probe(payload: bytes, data: st.DataObject) -> None:
        total = len(payload) + 60
        cuts = sorted(set(data.draw(st.lists(st.integers(1, total - 1), max_size=6))))
        for frame in _session(bus.address, payload, [cut for cut in cuts if cut < total]):
            if frame[0] == wire.Failure.code:
                assert frame[2] != Status.SERVER_ERROR, frame
                assert "\n" not in frame[3] and len(frame[3]) <= 400, frame
            if frame[0] == wire.Fatal.code:
                assert "\n" not in frame[2] and len(frame[2]) <= 400, frame

    probe()
    assert bus.process.running
    with connect_sync(bus.address, "IMPLICIT") as receiver:
        message = receiver.get(timeout=5)
    assert (message.seq, message.body) == (kept.seq, b"kept")
    assert "Traceback" not in bus.log_text()
