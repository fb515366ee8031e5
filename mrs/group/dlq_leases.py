"""Readers of the dead-letter queue: several at once, each message leased to one.

MessageQ lets one program attach a queue; a runmqdlq-style handler needs more: two
handlers working one DLQ side by side, neither acting on a message the other holds,
and nothing lost when one dies mid-action. So queue 96 is shared, and every get from
it is a *lease*: the message moves to the queue's unconfirmed set, held by the
session that got it (delivered CONFIRMREQ, or POSSDUPL when an earlier holder left
without confirming). It leaves the DLQ only when its holder confirms it — after the
forward or retry was acknowledged as stored. A holder that disconnects (or is
SIGKILLed) gives its leases back to the front of the queue for the next reader:
POSSDUPL when a copy of the letter may have left, else as it was (`HANDLER_PROGRAM`).

The group calls in here from attach, detach, get and confirm; the counts per reader
are what `mrs status` shows as `dlq_readers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from journals import GroupCommitWriter, InlineWriter, Journal, WriteBatch, queue_key
from mrs.core.delivery import Refused
from mrs.group.context import PACK_U32
from mrs.group.quarantine import INT64_MAX
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.model import Status

CONTEXT_HEADER = "pass_context"
"""A put from a DLQ reader may carry {"source": "G.Q", "put_time_ns": n, "dlq_seq": s}:
the message keeps its original sender (MQPMO_PASS_ALL_CONTEXT), and the group counts
it against the dead letter `s` the reader holds. Only DLQ readers may pass it."""

HANDLER_PROGRAM = "mrs dlq-handler"
"""The program `mrs dlq-handler` names in its Hello. A reader so named acts on a
letter it holds only by confirming it or by a put on its own connection that passes
the letter's context (`dlq_seq`), so the group knows which of its letters a copy may
have left for: a letter it held without such a put comes back as it was, not
POSSDUPL. Before, every letter a handler held (IGNORE, no header, waiting behind an
earlier one, never tried) came back POSSDUPL after each run, and its next forward
carried the mark to a receiver that had the only copy. Any other reader may have
used a letter another way (printed it, stored it, put a copy through another
connection): all it held comes back POSSDUPL, as from any queue."""


@dataclass(slots=True)
class Reader:
    program: str
    peer: str = "?"
    acts_by_puts: bool = False
    """Its Hello named HANDLER_PROGRAM: a letter it held without a put naming it
    comes back as it was."""
    got: int = 0
    moved: int = 0
    """Removed after a put passed its context (a FWD or RETRY stored)."""
    discarded: int = 0
    """Removed without a put."""
    put: int = 0
    leases: set[int] = field(default_factory=set)
    put_for: set[int] = field(default_factory=set)

    def as_dict(self, session_id: int) -> dict:
        return {
            "session": session_id,
            "program": self.program,
            "peer": self.peer,
            "got": self.got,
            "moved": self.moved,
            "discarded": self.discarded,
            "put": self.put,
            "held": len(self.leases),
        }


@dataclass(eq=False)
class DlqReaders:
    readers: dict[int, Reader] = field(default_factory=dict)

    def attach(self, queue: TargetQueue, session_id: int, program: str, peer: str) -> None:
        self.readers[session_id] = Reader(program, peer, program == HANDLER_PROGRAM)
        if queue.attached_session is None:
            queue.attached_session = session_id

    def detach(
        self, queue: TargetQueue, session_id: int, writer: GroupCommitWriter | InlineWriter
    ) -> list[Entry]:
        """Give the session's leases back (front, oldest first); drop its parked gets.
        A letter no copy can have left for comes back as it was (`_as_it_was`)."""
        reader = self.readers.pop(session_id, None)
        held = reader.leases if reader else set()
        returned = sorted(
            (queue.unconfirmed.pop(seq) for seq in held if seq in queue.unconfirmed),
            key=lambda entry: entry.seq,
        )
        if reader is not None and reader.acts_by_puts:
            untouched = [entry for entry in returned if entry.seq not in reader.put_for]
            _as_it_was(queue, untouched, writer)
        for entry in reversed(returned):
            queue.put_back(entry, front=True)
        for waiter in [w for w in queue.waiters if w.session_id == session_id]:
            waiter.cancel_timer()
            queue.unpark(waiter)
        queue.attached_session = next(iter(self.readers), None)
        return returned

    def leased(self, session_id: int, entry: Entry) -> None:
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.got += 1
            reader.leases.add(entry.seq)

    def check_holder(self, session_id: int, seq: int) -> None:
        reader = self.readers.get(session_id)
        if reader is None or seq not in reader.leases:
            raise Refused(Status.BADSEQ, f"dead letter {seq} is not held by this connection")

    def removed(self, session_id: int, seq: int) -> None:
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.leases.discard(seq)
            if seq in reader.put_for:
                reader.put_for.discard(seq)
                reader.moved += 1
            else:
                reader.discarded += 1

    def counted_put(self, session_id: int, dlq_seq: int | None) -> None:
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.put += 1
            if dlq_seq in reader.leases:
                reader.put_for.add(dlq_seq)

    def status_info(self) -> list[dict]:
        return [reader.as_dict(session_id) for session_id, reader in self.readers.items()]


def _as_it_was(
    queue: TargetQueue, entries: list[Entry], writer: GroupCommitWriter | InlineWriter
) -> None:
    """Uncount the lease's delivery of each entry, so its next reader gets it as the
    handler did (CONFIRMREQ, or POSSDUPL if an earlier holder may have put a copy).
    A journaled DLQ's delivery marks are rewritten too; the batch goes to the writer
    before any later delivery's mark, so they commit in that order. If the commit
    fails the old mark stands: POSSDUPL after a restart, never a copy unmarked."""
    batch: WriteBatch | None = None
    for entry in entries:
        entry.times_delivered = max(0, entry.times_delivered - 1)
        if not entry.journaled:
            continue
        batch = batch or WriteBatch.empty()
        key = queue_key(queue.address.queue, entry.seq)
        if entry.times_delivered:
            batch.put_raw(Journal.MARKS, key, PACK_U32(entry.times_delivered))
        else:
            batch.delete(Journal.MARKS, key)
    if batch is not None:
        writer.submit(batch, _ignored)


def _ignored(error: object) -> None:
    """A mark not rewritten errs towards POSSDUPL: nothing to undo."""


def passed_source(context: object) -> tuple[str, int | None, int | None]:
    """The original sender, put time and dead letter a DLQ reader passes; Refused if
    malformed."""
    if not isinstance(context, dict) or not isinstance(context.get("source"), str):
        raise Refused(Status.BADPARAM, f'headers.{CONTEXT_HEADER} must be {{"source": "G.Q"}}')
    put_time_ns = context.get("put_time_ns")
    # Bounded as a Delivery's put time is: one outside int64 was stored, answered
    # STORED and then refused by every delivery of it (quarantined: never delivered).
    if put_time_ns is not None and (
        type(put_time_ns) is not int or not 0 <= put_time_ns <= INT64_MAX
    ):
        raise Refused(
            Status.BADPARAM,
            f"headers.{CONTEXT_HEADER}.put_time_ns must be an int from 0 to {INT64_MAX}",
        )
    dlq_seq = context.get("dlq_seq")
    return context["source"], put_time_ns, dlq_seq if type(dlq_seq) is int else None
