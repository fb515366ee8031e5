"""CPU per message of the link's message path, in one process: build a LinkTransfer of
256 messages from queue entries (the SAF drain's shape), encode it, decode it at the
peer and turn each message into an entry (the poison checks included).

Why: the link items became typed msgspec structs (issue 14); this shows what that
costs or saves per message. Absolute figures are noise on a loaded machine: compare
two trees interleaved, e.g. with main exported to /tmp/base:

    for i in 1 2 3; do
      PYTHONPATH=/tmp/base python benchmarks/link_transfer_cpu.py before
      PYTHONPATH=.        python benchmarks/link_transfer_cpu.py after
    done
"""

from __future__ import annotations

import sys
import time

from msgspec.structs import asdict

from mrs import protocol as wire
from mrs.group.quarantine import transfer_problem
from mrs.group.shapes import Entry, entry_from_transfer, transfer_fields
from mrs.model import Address, DeliveryMode

MESSAGES_PER_TRANSFER = 256
TRANSFERS = 40
ROUNDS = 7


def cpu_us_per_message() -> float:
    entries = [
        Entry(
            seq=seq,
            body=b"x" * 100,
            source=Address(1, 11),
            target=Address(2, 10),
            delivery=DeliveryMode.WF_DQF,
            uma=1,
            put_time_ns=5,
        )  # fmt: skip
        for seq in range(1, MESSAGES_PER_TRANSFER + 1)
    ]
    dialer, listener = wire.Connection("client"), wire.Connection("server")
    listener.receive_data(dialer.send(wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)))
    listener.events()
    started_s = time.process_time()
    for request_id in range(1, TRANSFERS + 1):
        messages = [transfer_fields(entry, True) for entry in entries]
        listener.receive_data(dialer.send(wire.LinkTransfer(request_id, messages)))
        (transfer,) = listener.events()
        for message in transfer.messages:  # what mrs.group.inbound does per message
            assert transfer_problem(asdict(message)) is None
            entry_from_transfer(2, 1, message)
    return (time.process_time() - started_s) / (TRANSFERS * MESSAGES_PER_TRANSFER) * 1e6


if __name__ == "__main__":
    label = sys.argv[1] if len(sys.argv) > 1 else "this tree"
    best = min(cpu_us_per_message() for _ in range(ROUNDS))
    print(f"{label}: {best:.2f} us CPU per message (best of {ROUNDS})")
