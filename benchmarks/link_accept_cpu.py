"""The receiving group's CPU per SAF-drained message, in one process: what group 2
spends on a drain from group 1, without the sender, the sockets or the event loop.

Why: `benchmarks/saf_backlog_drain.py` runs two real groups on the same cores, so its
rates and CPU figures move with the machine's load; the receiver's own work is what
issue 52 asks to cut. This drives group 2's link session (`PeerLink.handle`) with the
frames group 1 sends during a drain, decoded from their bytes as the server does:

  transfer   a LinkTransfer of `--per-transfer` ordered WF_DQF (UMA SAF) messages,
             1 KiB bodies; the production InlineWriter commits each transfer (real
             LMDB journals with fsync), its LinkAck must answer every message STORED
  forget     the LinkNotice of ForgetNotices the sender sends once it deleted them
             from its SAF (its dedupe keys deleted), committed the same way

It prints the process CPU time per message, with `--own-puts` also that of group 2's
own WF_DQF puts of the same bodies (`Group.put`, as `benchmarks/put_path.py` does),
the ratio issue 52 is about. `--profile` prints the top functions by own time
(cProfile; with MRS_PURE_PYTHON=1 it sees inside the compiled modules).

    .venv/bin/python benchmarks/link_accept_cpu.py --own-puts
    MRS_PURE_PYTHON=1 .venv/bin/python benchmarks/link_accept_cpu.py --profile
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from in_process import Session, open_group  # the sibling module: imports mrs first

from journals import InlineWriter
from mrs import protocol as wire
from mrs.core.seqspace import GROUP_SHIFT
from mrs.group import Group
from mrs.group.link_session import PeerLink
from mrs.limits import LINK_NOTICES_PER_FRAME_MAX
from mrs.model import DeliveryMode, Status, Uma
from mrs.server import gc_tuning

BUS = """
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group]]
id = 2
name = "G2"
listen = "127.0.0.1:0"
data_dir = "g2"
[group.limits]
dqf_messages_max = 10000000
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 12
name = "REF"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 100
name = "SENDER"
[[link]]
groups = [1, 2]
address = "127.0.0.1:1"
"""
JOURNAL_BYTES = 8 << 30


@dataclass(eq=False)
class Channel:
    """The link connection's sending side: what group 2 answers."""

    closed: bool = False
    sent: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.sent.append(event)


def _wire_pair() -> tuple[wire.Connection, wire.Connection]:
    """Group 1's dialing connection and group 2's listening one, past the hello."""
    dialer, listener = wire.Connection("client"), wire.Connection("server")
    listener.receive_data(dialer.send(wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)))
    listener.events()
    return dialer, listener


def _transfer_bytes(
    dialer: wire.Connection, request_id: int, first_seq: int, count: int, body: bytes
) -> bytes:
    messages = [
        wire.TransferredMessage(
            seq,
            10,
            1,
            100,
            body,
            0,
            0,
            0,
            int(DeliveryMode.WF_DQF),
            int(Uma.SAF),
            b"",
            5,
            None,
            True,
        )
        for seq in range(first_seq, first_seq + count)
    ]
    return dialer.send(wire.LinkTransfer(request_id, messages))


def _forget_frames(dialer: wire.Connection, request_id: int, seqs: list[int]) -> list[bytes]:
    frames = []
    for start in range(0, len(seqs), LINK_NOTICES_PER_FRAME_MAX):
        notices = [
            wire.ForgetNotice(seq, 0) for seq in seqs[start : start + LINK_NOTICES_PER_FRAME_MAX]
        ]
        frames.append(dialer.send(wire.LinkNotice(request_id + start, notices)))
    return frames


FIRST_SEQ = (1 << GROUP_SHIFT) | 1
"""Group 1's first seq: a transferred seq carries its sender's id (mrs.core.seqspace)."""


def drain_cpu_s(group: Group, writer: InlineWriter, messages: int, per_transfer: int) -> float:
    """CPU seconds per message group 2 spends on `messages` drained to it."""
    dialer, listener = _wire_pair()
    link = PeerLink(group.link_rooms, 1)
    channel = Channel()
    body = b"x" * 1024
    frames = [
        _transfer_bytes(dialer, index + 1, FIRST_SEQ + index * per_transfer, per_transfer, body)
        for index in range(messages // per_transfer)
    ]
    gc_tuning.tune_gc_for_server()  # as `mrs serve` does once it has started
    started_s = time.process_time()
    for index, frame in enumerate(frames):
        listener.receive_data(frame)
        for event in listener.events():
            link.handle(event, channel)
        writer.commit_pending()
        (ack,) = channel.sent
        channel.sent.clear()
        stored = [result.seq for result in ack.results if result.status == Status.STORED]
        assert len(stored) == per_transfer, f"transfer {index}: {ack.results[:3]}"
        for notice_frame in _forget_frames(dialer, 1_000_000 + index * per_transfer, stored):
            listener.receive_data(notice_frame)
            for event in listener.events():
                link.handle(event, channel)
        writer.commit_pending()
        channel.sent.clear()
    spent_s = time.process_time() - started_s
    return spent_s / (len(frames) * per_transfer)


def own_put_cpu_s(group: Group, writer: InlineWriter, puts: int, batch: int) -> float:
    """CPU seconds per WF_DQF put of group 2's own client (the reference rate's work)."""
    session = Session()
    group.attach(session, wire.Attach(request_id=1, queue="2.100"))
    body = b"x" * 1024
    requests = [
        wire.Put(
            index + 1,
            "2.12",
            body,
            int(DeliveryMode.WF_DQF),
            int(Uma.SAF),
            0,
            0,
            0,
            0,
            b"",
            "",
            None,
        )
        for index in range(puts)
    ]
    started_s = time.process_time()
    for index, request in enumerate(requests, 1):
        group.put(session, request)
        if index % batch == 0:
            writer.commit_pending()
            session.sent.clear()
    writer.commit_pending()
    return (time.process_time() - started_s) / puts


def run(args: argparse.Namespace) -> tuple[float, float | None]:
    directory = Path(tempfile.mkdtemp(prefix="mrs-link-accept-", dir=args.scratch))
    try:
        group, writer, store = open_group(BUS, directory, 2, JOURNAL_BYTES)
        drained_s = 0.0
        if not args.only_own_puts:
            drained_s = drain_cpu_s(group, writer, args.messages, args.per_transfer)
        own_s = (
            own_put_cpu_s(group, writer, args.messages, args.per_transfer)
            if args.own_puts
            else None
        )
        store.close()
        return drained_s, own_s
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=51_200)
    parser.add_argument("--per-transfer", type=int, default=256, help="messages per LinkTransfer")
    parser.add_argument("--own-puts", action="store_true", help="also group 2's own puts")
    parser.add_argument("--only-own-puts", action="store_true", help="no drain (for callgrind)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--scratch", type=Path, default=Path.cwd())
    parser.add_argument("--label", default="this tree")
    args = parser.parse_args()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, args)
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        return
    rounds = [run(args) for _ in range(args.rounds)]
    drained = sorted(1e6 * drained_s for drained_s, _ in rounds)
    text = f"{args.label}: drained {drained[len(drained) // 2]:.2f} us CPU per message"
    text += f" (rounds: {', '.join(f'{value:.2f}' for value in drained)})"
    if args.own_puts:
        own = sorted(1e6 * own_s for _, own_s in rounds if own_s is not None)
        text += f"; own put {own[len(own) // 2]:.2f} us"
    print(text)


if __name__ == "__main__":
    main()
