"""Micro-benchmark of the wire codec: encode and decode of one put frame, per call.

Why: a put crosses the codec twice (client encode, server decode) and its answer
twice more; this isolates that cost from the journal and the network, so a change
to mrs.protocol can be judged by itself. Run it before and after such a change:

    .venv/bin/python benchmarks/protocol_codec.py            # 1 KiB body
    .venv/bin/python benchmarks/protocol_codec.py --body-bytes 100

To compare with an older commit in the same minutes, unpack that commit's `mrs/` and
put it first on the path:

    git archive OLD mrs | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/protocol_codec.py

It prints CPU microseconds per frame (the best of several repeats, so a busy machine
hurts it least) for: building a Put, encoding puts one by one (Connection.send),
decoding them one by one (receive_data + next_event), and the same for all of them in
buffers of 100 (send_many, events). Every put has its own request id, as on the wire.
"""

from __future__ import annotations

import argparse
import math
import time
import timeit

from mrs import protocol as wire
from mrs.model import DeliveryMode, Uma

REPEATS = 7
BATCH = 100
"""Frames per send_many / per buffer: what one send loop wake-up or one recv carries."""


def _put(request_id: int, body: bytes) -> wire.Put:
    return wire.Put(
        request_id,
        "2.20",
        body,
        int(DeliveryMode.WF_DQF),
        int(Uma.SAF),
        0,
        0,
        4,
        0,
        b"corr",
        "1.10",
        None,
    )


def _pair() -> tuple[wire.Connection, wire.Connection]:
    client, server = wire.Connection("client"), wire.Connection("server")
    server.receive_data(client.send(wire.Hello(wire.PROTOCOL_VERSION, "bench")))
    server.events()
    client.receive_data(server.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "g1")))
    client.events()
    return client, server


def _best_us(statement, number: int) -> float:
    """CPU microseconds per call: the best of REPEATS runs of `number` calls (CPU time,
    so other processes on a shared machine disturb it less than wall time would)."""
    runs = timeit.repeat(statement, number=number, repeat=REPEATS, timer=time.process_time)
    return min(runs) / number * 1e6


def _best_per_frame_us(setup, run, frames: int) -> float:
    """CPU microseconds per frame of `run(setup())`: the best of REPEATS runs. Each run
    gets fresh connections, as request ids may not repeat while in flight."""
    best = math.inf
    for _ in range(REPEATS):
        state = setup()
        start = time.process_time()
        run(state)
        best = min(best, time.process_time() - start)
    return best / frames * 1e6


def measure(body_bytes: int, number: int) -> dict[str, float]:
    """CPU microseconds per frame for each codec step."""
    body = b"x" * body_bytes
    puts = [_put(i, body) for i in range(1, number + 1)]
    frames = [_pair()[0].send(put) for put in puts]  # each from its own client
    batches = [puts[i : i + BATCH] for i in range(0, number, BATCH)]
    buffers = [b"".join(frames[i : i + BATCH]) for i in range(0, number, BATCH)]

    def send_one_by_one(client: wire.Connection) -> None:
        for put in puts:
            client.send(put)

    def decode_one_by_one(server: wire.Connection) -> None:
        for frame in frames:
            server.receive_data(frame)
            server.next_event()

    def send_batches(client: wire.Connection) -> None:
        for batch in batches:
            client.send_many(batch)

    def decode_batches(server: wire.Connection) -> None:
        for buffer in buffers:
            server.receive_data(buffer)
            server.events()

    return {
        "build Put": _best_us(lambda: _put(1, body), number),
        "encode Put (send)": _best_per_frame_us(lambda: _pair()[0], send_one_by_one, number),
        "decode Put (receive_data + next_event)": _best_per_frame_us(
            lambda: _pair()[1], decode_one_by_one, number
        ),
        f"encode {BATCH} Puts at once (send_many), per frame": _best_per_frame_us(
            lambda: _pair()[0], send_batches, number
        ),
        f"decode {BATCH} Puts from one buffer (events), per frame": _best_per_frame_us(
            lambda: _pair()[1], decode_batches, number
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--body-bytes", type=int, default=1024, help="put body size")
    parser.add_argument("--number", type=int, default=10_000, help="frames per repeat")
    args = parser.parse_args()
    results = measure(args.body_bytes, args.number)
    print(f"put frame, {args.body_bytes}-byte body; best of {REPEATS} repeats")
    for name, us in results.items():
        print(f"  {name:<55} {us:6.2f} us")


if __name__ == "__main__":
    main()
