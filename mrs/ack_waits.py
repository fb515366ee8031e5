"""MRS_ACKs a sender's group still owes for AK_CONF puts to other groups, journaled so
the acknowledgement survives a restart of the sender's group.

Why: an AK_CONF put returns at once; its MRS_ACK is due when the remote receiver
confirms, which may be after this group restarted. The remote group's confirm notice
travels durably, but the in-memory waiter that knew the response queue is gone after
a restart. So the response queue is journaled (META, key "ackwait:" + seq) when the
put is made and deleted when the acknowledgement is sent (or the put ends otherwise);
a confirm notice with no waiter in memory finds it here. A notice resent after a link
drop finds nothing (deleted, or being deleted), so the MRS_ACK is sent once.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgpack

from journals import Journal, JournalError, WriteBatch
from mrs.model import Address

if TYPE_CHECKING:
    from mrs.group import Group

log = logging.getLogger("mrs.ack_waits")

KEY_PREFIX = b"ackwait:"
_U64 = struct.Struct(">Q")


def ack_wait_key(seq: int) -> bytes:
    return KEY_PREFIX + _U64.pack(seq)


@dataclass(eq=False)
class AckWaits:
    group: Group
    _deleting: set[int] = field(default_factory=set)

    def journal(self, seq: int, response_queue: Address) -> None:
        """Remember (durably) that an MRS_ACK for `seq` is owed to `response_queue`."""
        value = msgpack.packb([response_queue.group, response_queue.queue])
        batch = WriteBatch.empty().put_raw(Journal.META, ack_wait_key(seq), value)
        self.group.writer.submit(batch, _log_failure(seq, "journal"))

    def done(self, seq: int) -> None:
        """The MRS_ACK was sent (or the put ended otherwise): forget it."""
        if seq in self._deleting:
            return
        self._deleting.add(seq)
        batch = WriteBatch.empty().delete(Journal.META, ack_wait_key(seq))
        report = _log_failure(seq, "delete")

        def deleted(error: JournalError | None) -> None:
            self._deleting.discard(seq)
            report(error)

        self.group.writer.submit(batch, deleted)

    def take(self, seq: int) -> Address | None:
        """The response queue still owed an MRS_ACK for `seq` (and forget it), or None."""
        if seq in self._deleting:
            return None
        value = self.group.store.get_raw(Journal.META, ack_wait_key(seq))
        if value is None:
            return None
        self.done(seq)
        group, queue = msgpack.unpackb(value)
        return Address(group, queue)

    def count(self) -> int:
        return sum(
            1 for key, _ in self.group.store.raw_items(Journal.META) if key.startswith(KEY_PREFIX)
        )


def _log_failure(seq: int, what: str):
    def report(error: JournalError | None) -> None:
        if error is not None:
            log.error("could not %s the MRS_ACK owed for seq %d: %s", what, seq, error)

    return report
