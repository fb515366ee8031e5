"""The server's CPU per message over real TCP, with a client that costs almost nothing.

Why: peerbench's rates mix the server with a Python client that is as busy as the
server, on two shared cores, so a change to the server's path shows up in them
only through noise. Here one `mrs serve` process is driven by a raw socket that
sends pre-encoded frames and counts the answers by their headers (no event objects,
no trio, no task per request): the server is the busy side, and its CPU time from
/proc divided by the messages is the figure to compare between builds.

    .venv/bin/python benchmarks/wire_cpu.py                      # puts, then put+get+confirm
    .venv/bin/python benchmarks/wire_cpu.py --messages 60000 --rounds 3 --shape puts

Shapes (1 KiB bodies, WF_DQF, UMA DLJ, window --window requests in flight):
- `puts`: durable puts to queue 1.10, nothing consumes them;
- `e2e`: the same puts on one connection, and a second connection attached to 1.10
  keeping --window gets in flight, each message confirmed as soon as it arrives;
- `memputs`: the puts as NN_MEM (nothing journaled, nothing consumed: the queue holds
  them in memory), the put's own logic without the journal;
- `pings`: Ping -> Pong, a request that touches no queue: the floor every request
  pays for framing, decoding, dispatch, the answer and the socket.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
from client_cpu import LIMITS, QUEUES_TOML  # the same queues as the client's bench
from procstat import process_cpu_s  # the sibling module (benchmarks/ is on sys.path)

from mrs import protocol as wire
from mrs.model import DeliveryMode, Uma
from sim.processes import GroupProcess, write_single_group_config

_HEADER = struct.Struct(">I")
_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder().decode


class RawConnection:
    """A blocking socket speaking just enough MRS: frames out, frames counted in."""

    def __init__(self, address: str, queue: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.send_frames([(wire.Hello.code, wire.PROTOCOL_VERSION, "wire_cpu", "app", 0)])
        self.send_frames([(wire.Attach.code, 1, queue)])
        self.read_frames(2)  # Welcome, Attached

    def send_frames(self, items: list[tuple]) -> None:
        out = bytearray()
        for item in items:
            payload = _ENCODE(item)
            out += _HEADER.pack(len(payload)) + payload
        self.sock.sendall(out)

    def read_frames(self, count_min: int) -> list[bytes]:
        """At least `count_min` whole frames (the payloads), reading as needed."""
        frames: list[bytes] = []
        while len(frames) < count_min:
            while len(self.buffer) >= 4:
                size = _HEADER.unpack_from(self.buffer)[0]
                if len(self.buffer) < 4 + size:
                    break
                frames.append(bytes(self.buffer[4 : 4 + size]))
                del self.buffer[: 4 + size]
            if len(frames) < count_min:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("server closed the connection")
                self.buffer += data
        return frames


def put_frame(request_id: int, body: bytes, mode: DeliveryMode = DeliveryMode.WF_DQF) -> tuple:
    return (
        wire.Put.code,
        request_id,
        "1.10",
        body,
        int(mode),
        int(Uma.DLJ if mode.recoverable else Uma.DISC),
        0,
        0,
        0,
        0,
        b"",
        "",
        None,
    )


def run_puts(address: str, messages: int, window: int, body: bytes) -> None:
    _pipelined(address, messages, window, lambda ids: [put_frame(i, body) for i in ids])


def run_memputs(address: str, messages: int, window: int, body: bytes) -> None:
    _pipelined(
        address,
        messages,
        window,
        lambda ids: [put_frame(i, body, DeliveryMode.NN_MEM) for i in ids],
    )


BATCH_PUTS = 64
"""Puts per PutBatch frame in the `batchputs` shape."""


def run_batchputs(address: str, messages: int, window: int, body: bytes) -> None:
    """The puts of `puts`, sent as PutBatch frames of up to BATCH_PUTS puts."""

    def frames(ids: range) -> list[tuple]:
        return [
            (wire.PutBatch.code, [put_frame(i, body) for i in ids[at : at + BATCH_PUTS]])
            for at in range(0, len(ids), BATCH_PUTS)
        ]

    _pipelined(address, messages, window, frames)


def run_pings(address: str, messages: int, window: int, body: bytes) -> None:
    _pipelined(address, messages, window, lambda ids: [(wire.Ping.code, i) for i in ids])


def _pipelined(
    address: str, messages: int, window: int, frames: Callable[[range], list[tuple]]
) -> None:
    """`messages` requests on one connection, `window` in flight, one answer each;
    `frames(ids)` makes the frames carrying the requests with those ids."""
    producer = RawConnection(address, "1.100")
    sent = answered = 0
    while answered < messages:
        room = min(window - (sent - answered), messages - sent)
        if room > 0:
            producer.send_frames(frames(range(sent + 100, sent + 100 + room)))
            sent += room
        answered += len(producer.read_frames(1))


def run_e2e(address: str, messages: int, window: int, body: bytes) -> None:
    """Puts and consumption interleaved: the producer keeps `window` puts in flight,
    the consumer `window` gets, and confirms each delivery at once."""
    producer = RawConnection(address, "1.100")
    consumer = RawConnection(address, "1.10")
    ids = iter(range(100, 1 << 62))
    sent = put_answered = confirmed = gets_out = 0
    consumer.sock.setblocking(False)
    producer.sock.setblocking(False)
    while confirmed < messages:
        room = min(window - (sent - put_answered), messages - sent)
        if room > 0:
            producer.sock.setblocking(True)
            producer.send_frames([put_frame(next(ids), body) for _ in range(room)])
            producer.sock.setblocking(False)
            sent += room
        get_room = min(window - gets_out, messages - confirmed - gets_out)
        if get_room > 0:
            consumer.sock.setblocking(True)
            consumer.send_frames([(wire.Get.code, next(ids), 1000) for _ in range(get_room)])
            consumer.sock.setblocking(False)
            gets_out += get_room
        put_answered += len(_poll(producer))
        confirms = []
        for frame in _poll(consumer):
            event = _DECODE(frame)
            if event[0] == wire.Delivery.code:
                gets_out -= 1
                confirms.append((wire.Confirm.code, next(ids), event[2], 0, 0))
            elif event[0] == wire.Confirmed.code:
                confirmed += 1
            elif event[0] == wire.Failure.code:
                gets_out -= 1  # a get timed out: ask again
        if confirms:
            consumer.sock.setblocking(True)
            consumer.send_frames(confirms)
            consumer.sock.setblocking(False)


def _poll(connection: RawConnection) -> list[bytes]:
    try:
        return connection.read_frames(1)
    except BlockingIOError:
        return []


def status(address: str) -> dict:
    """The server's status() (for its writer's batches per commit)."""
    connection = RawConnection(address, "1.10")
    connection.sock.setblocking(True)
    connection.send_frames([(wire.StatusRequest.code, 7)])
    return _DECODE(connection.read_frames(1)[0])[2]


def measure(shape: str, messages: int, window: int) -> tuple[float, float, float]:
    """(server CPU µs per message, messages per second, journal batches per commit)
    for one fresh server."""
    directory = Path(tempfile.mkdtemp(prefix="mrs-wire-", dir=Path.cwd()))
    try:
        config = write_single_group_config(directory, queues=QUEUES_TOML, limits=LIMITS)
        server = GroupProcess(config, 1)
        address = server.start()
        try:
            body = bytes(1024)
            cpu0, t0 = process_cpu_s(server.process.pid), time.perf_counter()
            RUNS[shape](address, messages, window, body)
            cpu1, t1 = process_cpu_s(server.process.pid), time.perf_counter()
            writer = status(address)["writer"]
        finally:
            server.terminate()
        return 1e6 * (cpu1 - cpu0) / messages, messages / (t1 - t0), writer["batches_per_commit"]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


RUNS = {
    "puts": run_puts,
    "batchputs": run_batchputs,
    "e2e": run_e2e,
    "memputs": run_memputs,
    "pings": run_pings,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=[*RUNS, "both"], default="both")
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    shapes = ["puts", "e2e"] if args.shape == "both" else [args.shape]
    for round_number in range(1, args.rounds + 1):
        for shape in shapes:
            cpu_us, rate, per_commit = measure(shape, args.messages, args.window)
            print(
                f"round {round_number} {shape:4}: server {cpu_us:6.1f} us CPU per message, "
                f"{rate:9,.0f} msgs/s, {per_commit:6.1f} batches per commit",
                flush=True,
            )


if __name__ == "__main__":
    main()
