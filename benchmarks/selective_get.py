"""A selective get by correlation id on a deep queue, against a real `mrs serve`.

Why: a selective get must be answered from the queue's index (mrs.group.select_index),
not by reading the queue: its latency must not grow with the number of messages
pending, and the index's memory per message bounds how deep a queue may be
(SELECT_INDEX_MESSAGES_MAX). This puts `--messages` WF_DQF messages (most of them
cold: seqs in memory, records on disk), each with its own correlation id, then times
`--gets` gets of random ones (each confirmed), and a plain get for comparison:

    .venv/bin/python benchmarks/selective_get.py --messages 100000

The queue's index starts with its first selective get, made here on the empty queue
so that the puts keep it (a first selective get on a full queue reads its records
once). Memory per message is measured in process with tracemalloc on the index alone
(16-byte correlation ids). Wall-clock latencies: on a loaded machine, compare runs
taken in the same minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import trio

from clients import DeliveryMode, NoMoreMessages, PutItem, Uma, connect
from mrs.core.selection import by_correlation_id
from mrs.group.select_index import SelectIndex
from mrs.model import Address
from sim.processes import GroupProcess, write_single_group_config

TARGET = "1.10"
SENDER = "1.100"
QUEUES_TOML = """
[[group.queue]]
id = 10
name = "TARGET"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 100
name = "SENDER"
"""
LIMITS = f"dqf_messages_max = 10000000\njournal_bytes_max = {16 << 30}\n"
PUT_BATCH = 1000


def correlation_id(number: int) -> bytes:
    return b"corr-%011d" % number  # 16 bytes


async def fill(address: str, messages: int, body_bytes: int) -> float:
    """Enable the index (a selective get on the empty queue), then put: put rate."""
    async with connect(address, queue=TARGET) as consumer:
        with contextlib.suppress(NoMoreMessages):
            await consumer.get(timeout=0, select=by_correlation_id(b"none"))
    body = b"x" * body_bytes
    start = time.perf_counter()
    async with connect(address, queue=SENDER) as producer:
        for first in range(0, messages, PUT_BATCH):
            items = [
                PutItem(
                    body, TARGET, DeliveryMode.WF_DQF, Uma.DLJ, correlation_id=correlation_id(n)
                )
                for n in range(first, min(first + PUT_BATCH, messages))
            ]
            for result in await producer.put_many(items):
                assert not isinstance(result, Exception), result
    return messages / (time.perf_counter() - start)


async def timed_gets(address: str, messages: int, gets: int) -> dict:
    """Latency of selective gets of random correlation ids, then of plain gets (ms)."""
    chosen = random.Random(7).sample(range(messages), gets)
    selective, plain = [], []
    async with connect(address, queue=TARGET) as consumer:
        for number in chosen:
            start = time.perf_counter()
            message = await consumer.get(
                timeout=0, select=by_correlation_id(correlation_id(number))
            )
            selective.append((time.perf_counter() - start) * 1000)
            assert message.correlation_id == correlation_id(number)
            await consumer.confirm(message.seq)
        for _ in range(gets):
            start = time.perf_counter()
            message = await consumer.get(timeout=0)
            plain.append((time.perf_counter() - start) * 1000)
            await consumer.confirm(message.seq)
    return {"selective_ms": percentiles(selective), "plain_ms": percentiles(plain)}


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
    }


def index_bytes_per_message(count: int) -> float:
    """tracemalloc's bytes left by indexing `count` messages (one class, each its own
    16-byte correlation id, which for a cold message only the index keeps)."""

    class Fake:
        __slots__ = ("correlation_id", "msg_class", "msg_type", "seq", "source")

    source = Address(1, 100)
    index = SelectIndex()
    index.enabled = True
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for seq in range(1 << 40, (1 << 40) + count):  # seqs as large as a group's
        fake = Fake()
        fake.seq, fake.correlation_id, fake.msg_class, fake.msg_type = (
            seq,
            correlation_id(seq),
            0,
            0,
        )
        fake.source = source
        index.add(fake, 0)
    del fake
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--gets", type=int, default=1000)
    parser.add_argument("--body-bytes", type=int, default=100)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="mrs-selective-"))
    config = write_single_group_config(directory, queues=QUEUES_TOML, limits=LIMITS)
    server = GroupProcess(config, 1)
    address = server.start()
    try:
        put_rate = trio.run(fill, address, args.messages, args.body_bytes)
        figures = trio.run(timed_gets, address, args.messages, args.gets)
    finally:
        server.terminate()
    figures |= {
        "messages_pending": args.messages,
        "gets": args.gets,
        "put_per_s": round(put_rate),
        "index_bytes_per_message": round(index_bytes_per_message(min(args.messages, 200_000))),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
