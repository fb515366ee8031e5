"""Micro-benchmark of the get -> confirm path in process: CPU per message and commits.

Why: the server's cost per consumed message is spread over many small steps (the
hand-over, its delivery mark, the confirm's deletes, the events sent back); peerbench
measures them all together with the client, the network and the other engineers on
the machine. This drives one group's rooms directly (mrs.group.Group over real LMDB
journals with fsync and the production InlineWriter, no sockets), so a change to the
hand-over can be judged by itself:

    .venv/bin/python benchmarks/handover_cpu.py

It prints, best of several repeats (a busy machine hurts that least):
- `get+confirm`: CPU microseconds per message for a get (timeout 0) and its confirm,
  messages already stored, batches of BATCH per commit as under load;
- `cold`: the same for a backlog three times as long, most of it cold (read back
  from the DQF a window at a time);
- `parked`: CPU microseconds per message when BATCH gets are parked before BATCH puts
  land (put + get + confirm), and how many commits each message needed.

To compare with an older commit in the same minutes, put its `mrs/` first on the path:

    git archive OLD mrs | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/handover_cpu.py
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

from in_process import Session
from in_process import open_group as open_in_process  # the sibling module: mrs first

from journals import InlineWriter
from mrs import protocol as wire
from mrs.group import Group
from mrs.model import DeliveryMode, Uma
from mrs.server.gc_tuning import tune_gc_for_server
from mrs.tools.cli_support import OneLineParser, positive_int

BUS = """
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:0"
data_dir = "g1"
[group.limits]
dqf_messages_max = 1000000
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
unconfirmed_max = 100000
[[group.queue]]
id = 11
name = "OUT"
"""
BATCH = 100
REPEATS = 5


def open_group(directory: Path) -> tuple[Group, InlineWriter, Session, Session]:
    group, writer, _ = open_in_process(BUS, directory, 1, 1 << 30)
    sender, receiver = Session(1), Session(2)
    group.attach(sender, wire.Attach(1, "OUT"))
    group.attach(receiver, wire.Attach(1, "IN"))
    return group, writer, sender, receiver


def puts(group: Group, sender: Session, ids: itertools.count, body: bytes) -> None:
    for _ in range(BATCH):
        group.put(
            sender,
            wire.Put(
                next(ids),
                "IN",
                body,
                int(DeliveryMode.WF_DQF),
                int(Uma.DISC),
                0,
                0,
                0,
                60_000,
                b"",
                "",
            ),
        )


def confirm_all(group: Group, receiver: Session, ids: itertools.count) -> None:
    delivered = [event for event in receiver.sent if isinstance(event, wire.Delivery)]
    receiver.sent.clear()
    assert len(delivered) == BATCH, receiver.sent[:3]
    for delivery in delivered:
        group.confirm(receiver, wire.Confirm(next(ids), delivery.seq, 0, 0))


def get_confirm(rounds: int, body: bytes) -> float:
    """CPU µs per message of get + confirm (stored messages waiting)."""
    with tempfile.TemporaryDirectory() as scratch:
        group, writer, sender, receiver = open_group(Path(scratch))
        ids = itertools.count(100)
        spent_s = 0.0
        for _ in range(rounds):
            puts(group, sender, ids, body)
            writer.commit_pending()
            sender.sent.clear()
            started = time.process_time()
            for _ in range(BATCH):
                group.get(receiver, wire.Get(next(ids), 0))
            writer.commit_pending()
            confirm_all(group, receiver, ids)
            writer.commit_pending()
            spent_s += time.process_time() - started
        group.store.close()
    return spent_s / (rounds * BATCH) * 1e6


def cold(rounds: int, body: bytes) -> float:
    """CPU µs per message of get + confirm with a backlog of rounds x BATCH messages
    stored first, so all but the queue's in-memory window go cold (mrs.group.backlog) and
    are read back from the DQF as the consumer gets to them."""
    with tempfile.TemporaryDirectory() as scratch:
        group, writer, sender, receiver = open_group(Path(scratch))
        ids = itertools.count(100)
        for _ in range(rounds):
            puts(group, sender, ids, body)
            writer.commit_pending()
        sender.sent.clear()
        started = time.process_time()
        for _ in range(rounds):
            for _ in range(BATCH):
                group.get(receiver, wire.Get(next(ids), 0))
            writer.commit_pending()
            confirm_all(group, receiver, ids)
            writer.commit_pending()
        spent_s = time.process_time() - started
        group.store.close()
    return spent_s / (rounds * BATCH) * 1e6


def parked(rounds: int, body: bytes) -> tuple[float, float]:
    """CPU µs per message of put + get + confirm with the gets parked first, and
    commits per message."""
    with tempfile.TemporaryDirectory() as scratch:
        group, writer, sender, receiver = open_group(Path(scratch))
        ids = itertools.count(100)
        started = time.process_time()
        commits_before = writer.stats.commits
        for _ in range(rounds):
            for _ in range(BATCH):
                group.get(receiver, wire.Get(next(ids), -1))
            puts(group, sender, ids, body)
            while writer.pending:
                writer.commit_pending()
            sender.sent.clear()
            confirm_all(group, receiver, ids)
            writer.commit_pending()
        spent_s = time.process_time() - started
        commits = writer.stats.commits - commits_before
        group.store.close()
    return spent_s / (rounds * BATCH) * 1e6, commits / rounds


def main() -> None:
    parser = OneLineParser(prog="handover_cpu.py", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=positive_int, default=30, help="batches of 100 per repeat")
    parser.add_argument("--body-bytes", type=int, default=1024)
    args = parser.parse_args()
    tune_gc_for_server()  # as `mrs serve` runs
    body = b"x" * args.body_bytes
    best = min(get_confirm(args.rounds, body) for _ in range(REPEATS))
    print(f"get+confirm: {best:.1f} µs CPU per message (best of {REPEATS})")
    best = min(cold(args.rounds * 3, body) for _ in range(REPEATS))
    print(f"cold: {best:.1f} µs CPU per message (get + confirm, backlog read back)")
    runs = [parked(args.rounds, body) for _ in range(REPEATS)]
    cpu, commits_per_round = min(runs)
    print(
        f"parked: {cpu:.1f} µs CPU per message (put + get + confirm), "
        f"{commits_per_round:.0f} commits per round of {BATCH} messages"
    )


if __name__ == "__main__":
    main()
