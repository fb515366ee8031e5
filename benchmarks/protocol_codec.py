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
hurts it least) for: building a Put, encoding it (Connection.send), decoding it
(receive_data + next_event), and the same for a batch of 1,000 frames in one buffer.
"""

from __future__ import annotations

import argparse
import time
import timeit

from mrs import protocol as wire
from mrs.model import DeliveryMode, Uma

REPEATS = 7


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


def measure(body_bytes: int, number: int) -> dict[str, float]:
    """Microseconds per frame for each codec step."""
    body = b"x" * body_bytes
    client, server = _pair()
    event = _put(1, body)
    frame = client.send(event)

    def decode_one() -> None:
        server.receive_data(frame)
        server.next_event()

    batch = client.send_many([_put(i, body) for i in range(1, 1001)])

    def decode_batch() -> None:
        server.receive_data(batch)
        server.events()

    batch_events = [_put(i, body) for i in range(1, 1001)]
    return {
        "build Put": _best_us(lambda: _put(1, body), number),
        "encode Put (send)": _best_us(lambda: client.send(event), number),
        "decode Put (receive_data + next_event)": _best_us(decode_one, number),
        "encode 1,000 Puts (send_many), per frame": _best_us(
            lambda: client.send_many(batch_events), max(1, number // 1000)
        )
        / 1000,
        "decode 1,000 Puts in one buffer, per frame": _best_us(decode_batch, max(1, number // 1000))
        / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--body-bytes", type=int, default=1024, help="put body size")
    parser.add_argument("--number", type=int, default=20_000, help="calls per repeat")
    args = parser.parse_args()
    results = measure(args.body_bytes, args.number)
    print(f"put frame, {args.body_bytes}-byte body; best of {REPEATS} repeats")
    for name, us in results.items():
        print(f"  {name:<45} {us:8.2f} us")


if __name__ == "__main__":
    main()
