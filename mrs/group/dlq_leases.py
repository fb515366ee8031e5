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

Each letter has one holder at a time (`DlqReaders.holders`): a lease is the
holder's until its confirm is committed, it disconnects, or the get that made it
fails, and a get by another reader makes that reader the holder. Before, a get whose
delivery mark failed to commit (JOURNAL_FAIL on a recoverable DLQ) left the letter
among its reader's leases: once another reader got it, the first one's detach put
it back on the DLQ, so a third reader got the letter the second was acting on, and
the second's confirm was refused (BADSEQ).

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
from mrs.model import Psb, Status

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

DISCARD_CONFIRM_VALUE = 1
"""The confirmation value `mrs dlq-handler` gives the confirm of a letter it discards
(DISCARD), whatever puts of it were tried and failed before; it confirms a letter it
moved (a FWD or RETRY put stored) with 0. The group counts a handler's letter as
moved or discarded by it: before, a letter whose put failed and that a DISCARD rule
then removed was counted moved, as any letter a put had named."""


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
    """The letters it holds: exactly the seqs `DlqReaders.holders` gives to it."""
    put_for: dict[int, int] = field(default_factory=dict)
    """Letter -> its puts taken in that may have left a copy (answered so, or not
    answered yet): a put answered with no copy kept anywhere is taken back."""
    confirming: dict[int, bool] = field(default_factory=dict)
    """seq -> discarded: a confirm of a letter it holds, not yet committed."""
    marking: set[int] = field(default_factory=set)
    """Letters handed to its get whose delivery mark is not committed yet. Left at
    its detach, such a letter keeps its count: the mark's commit may still succeed
    (POSSDUPL, erring safe), and if it fails the hand-over's undo takes the count
    back once (mrs.group.handover `_mark_failed`). Lowered by the detach too, it
    went below its true count, and a later copy came CONFIRMREQ: unmarked."""

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
    holders: dict[int, int] = field(default_factory=dict)
    """seq -> the session holding that letter: one holder per letter."""

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
        for seq in held:
            assert self.holders.get(seq) == session_id, "a reader's leases are its own"
            del self.holders[seq]
        returned = sorted(
            (queue.unconfirmed.pop(seq) for seq in held if seq in queue.unconfirmed),
            key=lambda entry: entry.seq,
        )
        if reader is not None and reader.acts_by_puts:
            untouched = [
                entry
                for entry in returned
                if entry.seq not in reader.put_for and entry.seq not in reader.marking
            ]
            _as_it_was(queue, untouched, writer)
        for entry in reversed(returned):
            queue.put_back(entry, front=True)
        for waiter in [w for w in queue.waiters if w.session_id == session_id]:
            waiter.cancel_timer()
            queue.unpark(waiter)
        queue.attached_session = next(iter(self.readers), None)
        return returned

    def leased(self, session_id: int, entry: Entry) -> None:
        """`entry` was handed to the session's get: the session is its one holder."""
        reader = self.readers.get(session_id)
        if reader is None:
            return
        self._let_go(entry.seq)  # a lease left behind elsewhere is over
        reader.got += 1
        reader.leases.add(entry.seq)
        self.holders[entry.seq] = session_id

    def marks_pending(self, session_id: int, seqs: list[int]) -> None:
        """The delivery marks of `seqs`, handed to the session's get, are committing."""
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.marking.update(seq for seq in seqs if self.holders.get(seq) == session_id)

    def marks_committed(self, session_id: int, seqs: list[int]) -> None:
        """Those marks are durable: the letters are handed out."""
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.marking.difference_update(seqs)

    def released(self, session_id: int, seq: int) -> None:
        """The get that leased `seq` failed (its delivery mark was not committed):
        the letter was never handed out, and the session holds it no longer."""
        reader = self.readers.get(session_id)
        if reader is not None and self.holders.get(seq) == session_id:
            reader.got -= 1
            self._let_go(seq)

    def _let_go(self, seq: int) -> None:
        holder = self.holders.pop(seq, None)
        reader = self.readers.get(holder) if holder is not None else None
        if reader is not None:
            reader.leases.discard(seq)
            reader.put_for.pop(seq, None)
            reader.confirming.pop(seq, None)
            reader.marking.discard(seq)

    def confirming(self, session_id: int, seq: int, confirm_value: int) -> None:
        """A confirm of `seq`: refused BADSEQ unless the session holds it. The lease
        stays until the confirm is committed (`removed`); a failed commit leaves it
        held, so the holder may confirm it again."""
        reader = self.readers.get(session_id)
        if reader is None or self.holders.get(seq) != session_id:
            raise Refused(Status.BADSEQ, f"dead letter {seq} is not held by this connection")
        discarded = reader.acts_by_puts and confirm_value == DISCARD_CONFIRM_VALUE
        reader.confirming[seq] = discarded or seq not in reader.put_for

    def confirm_failed(self, session_id: int, seq: int) -> None:
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.confirming.pop(seq, None)

    def removed(self, session_id: int, seq: int) -> None:
        """The confirm of `seq` is committed: the letter left the DLQ."""
        reader = self.readers.get(session_id)
        if reader is None or self.holders.get(seq) != session_id:
            return
        discarded = reader.confirming.pop(seq, seq not in reader.put_for)
        self._let_go(seq)
        if discarded:
            reader.discarded += 1
        else:
            reader.moved += 1

    def counted_put(self, session_id: int, dlq_seq: int | None) -> None:
        """A put passing the context of letter `dlq_seq` was taken in (past every
        refusal as it arrives: mrs.group.intake): a copy may leave for the letter."""
        reader = self.readers.get(session_id)
        if reader is not None:
            reader.put += 1
            if dlq_seq is not None and self.holders.get(dlq_seq) == session_id:
                reader.put_for[dlq_seq] = reader.put_for.get(dlq_seq, 0) + 1

    def put_answered(self, session_id: int, dlq_seq: int, psb: Psb) -> None:
        """A counted put of letter `dlq_seq` is answered. One that kept no copy (not
        delivered, and its UMA discarded it or failed) is taken back: with no other
        put of it in doubt, the letter comes back as it was, not POSSDUPL. Why: a put
        refused NO_DQF or EXCEEDQUOTA (the handler's UMA DISC) brought its letter
        back POSSDUPL, and the next run's put of it, after the operator fixed the
        queue, flagged the only copy a possible duplicate."""
        reader = self.readers.get(session_id)
        if reader is None or self.holders.get(dlq_seq) != session_id:
            return
        if not psb.kept_no_copy:
            return
        left = reader.put_for.get(dlq_seq, 0) - 1
        if left > 0:
            reader.put_for[dlq_seq] = left
        else:
            reader.put_for.pop(dlq_seq, None)

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
