"""Bad clients against a real `mrs serve` over real TCP, while an honest client puts, gets
and confirms beside them: connections that ask and never read the answers (memory of
all of them together), frames fuzzed with hypothesis (wrong types, missing and extra
fields, huge numbers and strings, deep nesting, random bytes, a frame announced at
2 GB, pieces a byte at a time). Each bad client gets a status or is closed with one
log line; the server logs no traceback, its memory stays bounded, and the honest
client loses nothing and is never disconnected."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients import DeliveryMode, Status, Uma, connect_sync
from mrs import protocol as wire

MIB = 1024 * 1024


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


@dataclass
class Honest:
    """An honest client's record: every message it put and got back, and any error."""

    rounds: int = 0
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _honest_loop(address: str, honest: Honest) -> None:
    """Put, get and confirm one message at a time until told to stop; each message got
    must be the one just put, first delivery, never a POSSDUPL."""
    try:
        with connect_sync(address, "ANYORDER") as client:
            while not honest.stop.is_set() or honest.rounds < 3:
                body = b"honest-%d" % honest.rounds
                done = client.put(body, target="1.11", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
                message = client.get(timeout=20)
                assert (message.seq, message.body) == (done.seq, body), message
                assert message.delivery_status == Status.CONFIRMREQ, message
                message.confirm()
                honest.rounds += 1
    except BaseException as error:  # noqa: BLE001 - reported by the test
        honest.errors.append(error)


@contextmanager
def honest_beside(address: str) -> Iterator[Honest]:
    """An honest client working in a thread for the whole block; at its end it must
    have gone on throughout, without an error or a disconnect."""
    honest = Honest()
    thread = threading.Thread(target=_honest_loop, args=(address, honest), daemon=True)
    thread.start()
    try:
        yield honest
    finally:
        honest.stop.set()
        thread.join(60)
    assert not thread.is_alive(), "the honest client hung"
    assert not honest.errors, honest.errors
    assert honest.rounds >= 3


# -- connections that ask and never read -----------------------------------------------


def _ask_and_never_read(address: str) -> socket.socket:
    """A connection that says Hello and sends StatusRequests (answered with about a KiB
    each) without reading a byte,
    until its sends block for a second (the server stopped reading it) or the server
    closes it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.connect(_address(address))
    sock.settimeout(1.0)
    client = wire.Connection("client")
    sock.sendall(client.send(wire.Hello(wire.PROTOCOL_VERSION, "lazy")))
    request_ids = iter(range(1, 2**62))
    try:
        while True:
            frames = [wire.StatusRequest(next(request_ids)) for _ in range(4096)]
            sock.sendall(client.send_many(frames))
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        return sock


def _closed_by_server(sock: socket.socket, wait_s: float = 5.0) -> bool:
    """Whether the server closed `sock` (EOF or reset after what it sent), reading
    what it left; False if it still holds it open after `wait_s`. A deadline for the
    whole read, not for each silence: the connection the server keeps (under the
    bound) is answered on as it is read, 4 KiB at a time, for a minute."""
    deadline_s = time.monotonic() + wait_s
    try:
        while (left_s := deadline_s - time.monotonic()) > 0:
            sock.settimeout(left_s)
            if not sock.recv(1 << 20):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def test_connections_that_never_read_their_answers_are_bounded_in_all(make_bus) -> None:
    """Each connection that asks and reads nothing holds up to 8 MiB of answers before
    the server stops reading it, and StatusReplies answered after that up to
    requests_in_flight_max (its own bounds), but nothing bounded the sum: 8 of them
    grew the server by 176 MB, and a thousand from one address (within
    connections_per_peer_max) would hold 20 GB until client_idle_s_max. Now answers
    left unread by all connections together are bounded (answers_unread_bytes_max):
    past it the connection holding most is closed with one log line, and a client
    that reads is served throughout."""
    bound_mib = 16
    bus = make_bus(group_extra=f"[group.guards]\nanswers_unread_bytes_max = {bound_mib * MIB}\n")
    pid = bus.process.process.pid
    with honest_beside(bus.address):
        lazy = [_ask_and_never_read(bus.address) for _ in range(3)]
        first_mib = _rss_mib(pid)
        lazy += [_ask_and_never_read(bus.address) for _ in range(6)]
        grown_mib = _rss_mib(pid) - first_mib  # 6 more: some 150 MiB more, unbounded
        closed = [_closed_by_server(sock) for sock in lazy]
    for sock in lazy:
        sock.close()
    assert grown_mib < 64, grown_mib
    assert sum(closed) >= 6, closed
    log = bus.log_text()
    assert "closing connection (EXCEEDQUOTA)" in log and "answers_unread_bytes_max" in log
    assert "Traceback" not in log
    assert bus.process.running


# -- fuzzed frames (hypothesis) ---------------------------------------------------------

CODES = [1, 2, 10, 12, 14, 15, 16, 18, 20, 22, 23, 25, 27, 32, 40, 41, 42, 50, 51, 60, 62, 70, 99]
"""Every kind of event a client sends, some it must not (server and link events), an
unknown code."""

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
    | st.sampled_from(["x" * 100_000, b"\0" * 100_000, "ORDERS", "1.10", -1, 0, 1]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


def _framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@st.composite
def bad_frames(draw: st.DrawFn) -> bytes:
    """One frame a bad client sends: an event of any code with fields of any type and
    count, garbage behind a true length, a list nested deep enough to hurt a decoder,
    or a length of 2 GB with nothing behind it."""
    kind = draw(st.sampled_from(["event", "garbage", "deep", "huge"]))
    if kind == "event":
        fields = draw(st.lists(VALUES, max_size=14))
        return _framed(msgpack.packb([draw(st.sampled_from(CODES)), *fields], use_bin_type=True))
    if kind == "garbage":
        return _framed(draw(st.binary(min_size=0, max_size=64)))
    if kind == "deep":
        depth = draw(st.sampled_from([99, 101, 1000, 100_000]))
        return _framed(b"\x94\x0e\x01\x00" + b"\x91" * depth + b"\x01")  # a Get's select
    return struct.pack(">I", 2**31)


def _answers_until_pong_or_close(sock: socket.socket) -> list:
    """The frames the server sent until its Pong, or until it closed the connection."""
    buffer, frames = b"", []
    while not any(frame[0] == wire.Pong.code for frame in frames):
        try:
            received = sock.recv(1 << 20)
        except ConnectionResetError:
            received = b""
        if not received:
            return frames
        buffer += received
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
            size = struct.unpack(">I", buffer[:4])[0]
            frames.append(msgpack.unpackb(buffer[4 : 4 + size], strict_map_key=False))
            buffer = buffer[4 + size :]
    return frames


def _send_bad(address: str, hello_version: int | None, frame: bytes, piece_bytes: int) -> list:
    """A Hello of `hello_version` (none if None), Attach, `frame` and a Ping, written
    `piece_bytes` at a time; the frames the server answered."""
    start = b""
    if hello_version is not None:
        start = _framed(msgpack.packb([1, hello_version, "bad"]))
        if hello_version == wire.PROTOCOL_VERSION:
            start += _framed(msgpack.packb([10, 1, "ORDERS"]))
    data = start + frame + _framed(msgpack.packb([50, 7]))
    with socket.create_connection(_address(address), timeout=15) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for begin in range(0, len(data), piece_bytes):
            try:
                sock.sendall(data[begin : begin + piece_bytes])
            except (BrokenPipeError, ConnectionResetError):
                break  # closed after its Fatal: read that
        return _answers_until_pong_or_close(sock)


def test_fuzzed_frames_beside_an_honest_client_get_a_status_or_a_fatal(bus) -> None:
    """Frames of every code with fields of any type, count and size, garbage msgpack,
    deep nesting, a 2 GB length, a Hello of another version or none, written whole or
    a byte at a time: each connection ends answered (a Pong after its Failures, none
    SERVER_ERROR) or closed after one one-line Fatal; the honest client beside them
    loses nothing, the server logs no traceback and does not grow."""
    pid = bus.process.process.pid
    before_mib = _rss_mib(pid)
    closed_by_fatal: list[bytes] = []

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        hello_version=st.sampled_from([None, 1, 1, 1, 0, 2, -1, 2**40]),
        frame=bad_frames(),
        piece_bytes=st.sampled_from([1, 7, 1 << 20]),
    )
    def probe(hello_version: int | None, frame: bytes, piece_bytes: int) -> None:
        if piece_bytes == 1 and len(frame) > 400:
            piece_bytes = 1 << 20  # a byte at a time for the short ones only
        answers = _send_bad(bus.address, hello_version, frame, piece_bytes)
        fatals = [answer for answer in answers if answer[0] == wire.Fatal.code]
        for answer in answers:
            if answer[0] == wire.Failure.code:
                assert answer[2] != -1014, answer  # SERVER_ERROR
        if answers and answers[-1][0] == wire.Pong.code:
            assert not fatals, answers
            return
        assert len(fatals) == 1 and answers[-1] is fatals[0], answers
        closed_by_fatal.append(frame)
        assert fatals[0][1] == -1012, answers  # PROTOCOL_ERROR
        assert "\n" not in fatals[0][2] and len(fatals[0][2]) <= 400, answers

    with honest_beside(bus.address):
        probe()
    assert len(closed_by_fatal) >= 20, closed_by_fatal  # the fuzzing reached the server
    assert _rss_mib(pid) - before_mib < 60
    log = bus.log_text()
    assert "Traceback" not in log
    assert log.count("protocol error:") >= 1
    assert bus.process.running
