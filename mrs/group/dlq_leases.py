"""Readers of the dead-letter queue: several at once, each message leased to one.

MessageQ lets one program attach a queue; a runmqdlq-style handler needs more: two
handlers working one DLQ side by side, neither acting on a message the other holds,
and nothing lost when one dies mid-action. So queue 96 is shared, and every get from
it is a *lease*: the message moves to the queue's unconfirmed set, held by the
session that got it (delivered CONFIRMREQ, or POSSDUPL when an earlier holder left
without confirming). It leaves the DLQ only when its holder confirms it — after the
forward or retry was acknowledged as stored. A holder that disconnects (or is
SIGKILLed) gives its leases back to the front of the queue for the next reader.

The group calls in here from attach, detach, get and confirm; the counts per reader
are what `mrs status` shows as `dlq_readers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mrs.core.delivery import Refused
from mrs.group.quarantine import INT64_MAX
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.model import Status

CONTEXT_HEADER = "pass_context"
"""A put from a DLQ reader may carry {"source": "G.Q", "put_time_ns": n, "dlq_seq": s}:
the message keeps its original sender (MQPMO_PASS_ALL_CONTEXT), and the group counts
it against the dead letter `s` the reader holds. Only DLQ readers may pass it."""


@dataclass(slots=True)
class Reader:
    program: str
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
            "got": self.got,
            "moved": self.moved,
            "discarded": self.discarded,
            "put": self.put,
            "held": len(self.leases),
        }


@dataclass(eq=False)
class DlqReaders:
    readers: dict[int, Reader] = field(default_factory=dict)

    def attach(self, queue: TargetQueue, session_id: int, program: str) -> None:
        self.readers[session_id] = Reader(program)
        if queue.attached_session is None:
            queue.attached_session = session_id

    def detach(self, queue: TargetQueue, session_id: int) -> list[Entry]:
        """Give the session's leases back (front, oldest first); drop its parked gets."""
        reader = self.readers.pop(session_id, None)
        held = reader.leases if reader else set()
        returned = sorted(
            (queue.unconfirmed.pop(seq) for seq in held if seq in queue.unconfirmed),
            key=lambda entry: entry.seq,
        )
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
