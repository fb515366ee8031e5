"""Room: the DQF and its dedupe keys — store a recoverable message once, read it back,
move one that cannot be delivered to the DLJ.

Nothing is reported stored before its transaction is durable: `store_in_dqf`
answers through `outcome` from the writer's callback. A message whose dedupe key
(origin group and seq, or an application idempotency key) was stored before is
answered with the first copy's seq and not stored again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    JournalFullError,
    WriteBatch,
    queue_key,
    seq_key,
)
from journals.writer import NOT_ATTEMPTED
from mrs.group.context import BODIES_IN_MEMORY_PER_QUEUE_MAX, U64, GroupContext, Outcome
from mrs.group.idempotency import APP_PREFIX, PURGE_INTERVAL_S, AppKeys
from mrs.group.peers import Peers
from mrs.group.quarantine import QUARANTINE_EXTRA
from mrs.group.queues import GetWaiter, TargetQueue
from mrs.group.shapes import Entry, encode_entry, record_from_entry
from mrs.limits import DEDUPE_PURGE_STEP_S, DEDUPE_WAITERS_MAX
from mrs.model import Status
from mrs.storage.journal_reserve import JournalReserve

log = logging.getLogger("mrs.group")

_DQF: Final = Journal.DQF
_META: Final = Journal.META
PRIORITY_PREFIX: Final = b"prio:"
"""META key prefix (then the DQF key) of a stored message's priority, written only
for priority > 0 in the transaction that stores it and deleted with its confirm:
start-up reads these few keys, not the records, to put each recovered seq in its
priority lane (mrs.group.recovery). One left behind by another removal of the record
(quarantine, a dead letter) is deleted at the next start."""


def keep_priority(batch: WriteBatch, dqf_key: bytes, priority: int) -> None:
    """Store a message's priority beside its DQF record at `dqf_key` (nothing for 0)."""
    if priority:
        batch.put_raw(_META, PRIORITY_PREFIX + dqf_key, bytes((priority,)))


def forget_priority(batch: WriteBatch, dqf_key: bytes, priority: int) -> None:
    """Delete what `keep_priority` stored, with the DQF record at `dqf_key`."""
    if priority:
        batch.delete(_META, PRIORITY_PREFIX + dqf_key)


_STORED: Final = Status.STORED
"""Read on every store. An enum member's alias saves ~30-50 ns per read once compiled;
a plain imported name is read directly (7 ns; benchmarks/README.md, "Final aliases")."""


class Premark(Protocol):
    """What the DQF asks of the hand-over room (mrs.group.handover) around a store."""

    def premark(self, queue: TargetQueue, entry: Entry, batch: WriteBatch) -> GetWaiter | None: ...

    def deliver_premarked(self, queue: TargetQueue, entry: Entry, waiter: GetWaiter) -> None: ...

    def unreserve(self, queue: TargetQueue, waiter: GetWaiter) -> None: ...


@dataclass(eq=False)
class Dqf:
    ctx: GroupContext
    peers: Peers
    app_keys: AppKeys = field(init=False)
    """Idempotency keys (mrs.group.idempotency), opened in `__post_init__`."""
    reserve: JournalReserve | None = None
    """Refuses new messages before the journal is full (mrs.storage.journal_reserve)."""
    premark: Premark | None = None
    """The hand-over's `premark`/`deliver_premarked`/`unreserve` (set when wired):
    a parked get is answered from the message's own commit."""
    _dedupe_waiting: dict[str, list[Outcome]] = field(default_factory=dict)
    """Dedupe key in flight -> the copies waiting for its commit."""
    dedupe_waiters: int = 0
    """Copies waiting, over all keys: at most `DEDUPE_WAITERS_MAX`."""
    copies_awaiting_confirm: dict[int, list[Callable[[Entry], None]]] = field(default_factory=dict)
    """First copy's seq -> the WF_CONF copies of it (re-sent under its idempotency key)
    waiting for its confirm (`await_confirm`): at most DEDUPE_WAITERS_MAX seqs."""
    dedupe_keys_purged: int = 0
    """Expired keys the purge's sweep under way deleted so far (logged at its end)."""

    def __post_init__(self) -> None:
        limits = self.ctx.limits
        self.app_keys = AppKeys(self.ctx.store, limits.dedupe_window_s, self.ctx.clock_ns)
        self.reserve = JournalReserve.for_store(
            self.ctx.store, limits.journal_bytes_max, limits.message_bytes_max
        )

    def await_confirm(self, queue: int, seq: int, notify: Callable[[Entry], None]) -> bool:
        """A WF_CONF copy of message `seq` of `queue`: `notify` at its confirm, as the
        first copy's sender is (True); False when the DQF no longer holds it (confirmed
        already: answer now) or DEDUPE_WAITERS_MAX seqs have copies waiting. Why: a
        copy was answered at once (STORED), before the receiver confirmed, so a
        WF_CONF put re-sent after a lost connection or a failover (the replicated
        client re-sends every one) returned before the confirm it waits for."""
        waiting = self.copies_awaiting_confirm
        if seq not in waiting and len(waiting) >= DEDUPE_WAITERS_MAX:
            return False
        if self.ctx.store.get_raw(Journal.DQF, queue_key(queue, seq)) is None:
            return False
        waiting.setdefault(seq, []).append(notify)
        return True

    def confirmed(self, entry: Entry) -> None:
        """`entry` was confirmed: the copies waiting for it are answered."""
        for notify in self.copies_awaiting_confirm.pop(entry.seq, ()):
            notify(entry)

    def copies_left(self, seq: int) -> list[Callable[[Entry], None]]:
        """Message `seq` left the DQF unconfirmed (purged, quarantined): the copies that
        waited for its confirm, no longer kept (the caller tells their senders). Why:
        they stayed for ever, and at DEDUPE_WAITERS_MAX seqs every later WF_CONF copy
        was answered before its confirm (soak probe: one per purged message)."""
        return self.copies_awaiting_confirm.pop(seq, [])

    def copies_moved(self, seq: int, moved_seq: int) -> None:
        """Message `seq` now waits as `moved_seq` (an operator's move): its copies wait
        for that one's confirm, as its first sender does."""
        copies = self.copies_awaiting_confirm.pop(seq, None)
        if copies is not None:
            self.copies_awaiting_confirm[moved_seq] = copies

    def journal_full(self, size_bytes: int) -> str | None:
        """Why the journal cannot take a message of this size now, or None."""
        return self.reserve.accepts(size_bytes) if self.reserve is not None else None

    def store_in_dqf(
        self,
        entry: Entry,
        dedupe_keys: list[str],
        outcome: Outcome,
        stream: object = None,
        guard: Callable[[], bool] | None = None,
        dead_letter: bool = False,
        moved: Callable[[WriteBatch], None] | None = None,
    ) -> None:
        """Store a recoverable entry in this group's DQF and offer it to its queue once
        durable. `outcome(status, seq, reason)`: STORED with the seq stored (the first
        copy's, for a duplicate key), or the cause that makes it undeliverable
        (NO_DQF, DQF_FULL, MRS_RES_EXH, DQF_DEVICE_FAIL). `dead_letter`: a copy for the
        DLQ, journaled whatever the DLQ's config (mrs.group.umas
        `put_on_dead_letter_queue` decides). `moved(batch)`: given the commit that
        stores it, to delete in it what the stored copy replaces."""
        ctx = self.ctx
        queue = ctx.queues.get(entry.target.queue)
        if queue is None or not (dead_letter or queue.config.recoverable):
            outcome(Status.NO_DQF, entry.seq, f"no DQF for target {entry.target}")
            return
        # Only an application key compares bodies: a link's origin key holds a seq alone,
        # so a drained message costs no fingerprint of its body.
        app_keyed = any(key.startswith(APP_PREFIX) for key in dedupe_keys)
        digest = self.app_keys.digest_of(entry.body) if app_keyed else b""
        for key in dedupe_keys:
            if self._answer_duplicate(key, outcome, digest, entry.body):
                return
        if full := self.journal_full(len(entry.body or b"")):
            outcome(Status.MRS_RES_EXH, entry.seq, full)
            return
        if not self.peers.may_store(entry.origin_group):
            outcome(
                Status.DQF_FULL,
                entry.seq,
                f"DQF holds dqf_messages_max={ctx.limits.dqf_messages_max}",
            )
            return
        ctx.counts.dqf_added()
        entry.journaled = True
        dqf_key = queue_key(queue.address.queue, entry.seq)
        batch = WriteBatch.empty().put_raw(_DQF, dqf_key, encode_entry(entry, ctx.clock_ns()))
        keep_priority(batch, dqf_key, entry.priority)
        batch.stream, batch.guard = stream, guard
        if moved is not None:
            moved(batch)
        for key in dedupe_keys:
            self._dedupe_waiting[key] = []
            if key.startswith(APP_PREFIX):
                self.app_keys.inflight[key] = (digest, entry.seq)
                value = self.app_keys.value(entry.seq, digest)
            else:
                value = U64.pack(entry.seq)
            batch.put_raw(Journal.DEDUPE, key.encode(), value)
        waiter = self.premark.premark(queue, entry, batch) if self.premark else None
        queue.stores.submitted(waiter is not None)
        ctx.writer.submit(batch, _Stored(self, queue, entry, dedupe_keys, outcome, waiter))

    def _stored(
        self,
        queue: TargetQueue,
        entry: Entry,
        dedupe_keys: list[str],
        outcome: Outcome,
        error: JournalError | None,
        waiter: GetWaiter | None = None,
    ) -> None:
        """The DQF commit of one message ended: answer it and any duplicate waiting."""
        queue.stores.ended(waiter is not None)
        if waiter is not None and error is not None:
            assert self.premark is not None  # the waiter came from it
            self.premark.unreserve(queue, waiter)
        cause = _STORED
        reason = ""
        if error is not None:
            self.ctx.counts.dqf_removed()
            self.peers.dqf_freed()
            entry.journaled = False
            full = isinstance(error, JournalFullError)
            cause = Status.MRS_RES_EXH if full else Status.DQF_DEVICE_FAIL
            if error is NOT_ATTEMPTED:
                cause = Status.LINK_DOWN  # an earlier message of its link failed
            reason = str(error)
        for key in dedupe_keys:
            self.app_keys.inflight.pop(key, None)
            waiters = self._dedupe_waiting.pop(key, [])
            self.dedupe_waiters -= len(waiters)
            for waiting in waiters:
                waiting(cause, entry.seq, reason)
        if error is None:
            if waiter is not None:
                assert self.premark is not None  # the waiter came from it
                self.premark.deliver_premarked(queue, entry, waiter)
            else:
                if len(queue.pending) >= BODIES_IN_MEMORY_PER_QUEUE_MAX:
                    entry.body = None
                queue.offer(entry)
        outcome(cause, entry.seq, reason)

    def _answer_duplicate(
        self, key: str, outcome: Outcome, digest: bytes, body: bytes | None
    ) -> bool:
        """A message whose dedupe key was already stored is answered with the first
        copy's seq and not stored again (one in flight: answered when it lands); an
        application key reused for another body is refused KEY_REUSED
        (mrs.group.idempotency); an expired one stores the message again."""
        if key in self._dedupe_waiting:
            if self.app_keys.inflight.get(key, (digest, 0))[0] != digest:
                outcome(Status.KEY_REUSED, 0, "idempotency key reused for another body")
            elif self.dedupe_waiters >= DEDUPE_WAITERS_MAX:
                outcome(Status.LINK_DOWN, 0, self._waiters_full())
            else:
                self._dedupe_waiting[key].append(outcome)
                self.dedupe_waiters += 1
            return True
        found = self.app_keys.lookup(key, digest, body)
        if found is None:
            return False
        seq, same = found
        if not same:
            outcome(Status.KEY_REUSED, seq, "idempotency key reused for another body")
        else:
            outcome(Status.STORED, seq, "")
        return True

    def dedupe_busy(self, key: str) -> str | None:
        """Why a put with this dedupe key must be refused QUEUE_BUSY now (an earlier
        copy is in flight and the copies waiting for commits are at their bound), or
        None. Asked before a put is answered, so the refusal takes no UMA."""
        if key in self._dedupe_waiting and self.dedupe_waiters >= DEDUPE_WAITERS_MAX:
            return self._waiters_full()
        return None

    def _waiters_full(self) -> str:
        return (
            f"an earlier copy with this dedupe key is being stored, and {DEDUPE_WAITERS_MAX} "
            "copies (of all keys) already wait for theirs: try again later"
        )

    def purge_dedupe_keys(self, *, now: bool = False, after: bytes | None = None) -> None:
        """One step of the sweep that deletes expired application keys (and old unscoped
        ones), from the key after `after`: at start-up (`now`, before the writer runs),
        then every DEDUPE_PURGE_STEP_S until the sweep has looked at every key, then
        again PURGE_INTERVAL_S later (mrs.group.idempotency)."""
        stale, resume = self.app_keys.expired(after)
        if stale:
            batch = WriteBatch.empty()
            for key in stale:
                batch.delete(Journal.DEDUPE, key)
            if now:
                self.ctx.store.commit_now(batch)
            else:
                self.ctx.writer.submit(batch, _ignore_error)
            self.dedupe_keys_purged += len(stale)
        if resume is None:
            if self.dedupe_keys_purged:
                log.info("purged %d expired idempotency keys", self.dedupe_keys_purged)
            self.dedupe_keys_purged = 0
        delay_s = PURGE_INTERVAL_S if resume is None else DEDUPE_PURGE_STEP_S
        self.ctx.timers.call_later(delay_s, _PurgeStep(self, resume))

    def load_body(self, queue: TargetQueue, entry: Entry) -> bool:
        """Read a journaled body left on disk; False (and reported) if it is unusable."""
        key = queue_key(queue.address.queue, entry.seq)
        try:
            record = self.ctx.store.get(Journal.DQF, key)
        except CorruptRecord as corrupt:
            self.ctx.report_corrupt(corrupt)
            return False
        if record is None:
            log.error("DQF message %d of %s vanished from the journal", entry.seq, queue.address)
            return False
        entry.body = record.body
        entry.trusted = False  # read back from disk: its Delivery is checked
        return True

    def quarantine(self, queue: TargetQueue, entry: Entry, problem: str) -> None:
        """A message that cannot be delivered goes to the DLJ (reason BADPARAM, the
        problem in extra) in one transaction with its DQF removal; never fatal."""
        log.error("message %d on %s quarantined to the DLJ: %s", entry.seq, queue.address, problem)
        record = record_from_entry(entry, written_time_ns=self.ctx.clock_ns())
        record.reason = int(Status.BADPARAM)
        record.extra[QUARANTINE_EXTRA] = problem
        batch = WriteBatch.empty().put_record(Journal.DLJ, seq_key(entry.seq), record)
        if entry.journaled:
            key = queue_key(queue.address.queue, entry.seq)
            batch.delete(Journal.DQF, key).delete(Journal.MARKS, key)
        self.ctx.writer.submit(batch, _Quarantined(self.ctx, entry, self.copies_awaiting_confirm))


class _Stored:
    """Writer callback of one DQF store (a class, not a closure: its state is named).
    `waiter`: the parked get reserved for this message (its mark is in the same batch)."""

    def __init__(
        self,
        dqf: Dqf,
        queue: TargetQueue,
        entry: Entry,
        dedupe_keys: list[str],
        outcome: Outcome,
        waiter: GetWaiter | None = None,
    ) -> None:
        self.dqf = dqf
        self.queue = queue
        self.entry = entry
        self.dedupe_keys = dedupe_keys
        self.outcome = outcome
        self.waiter = waiter

    def __call__(self, error: JournalError | None) -> None:
        self.dqf._stored(self.queue, self.entry, self.dedupe_keys, self.outcome, error, self.waiter)


@dataclass(eq=False, slots=True)
class _Quarantined:
    ctx: GroupContext
    entry: Entry
    copies: dict[int, list[Callable[[Entry], None]]]

    def __call__(self, error: JournalError | None) -> None:
        if error is not None:
            # Still in the DQF (if it was journaled): quarantined again after a restart.
            log.error("message %d could not be quarantined: %s", self.entry.seq, error)
            return
        self.ctx.quarantined += 1
        self.ctx.counts.dlj_added()
        self.copies.pop(self.entry.seq, None)  # never confirmed now (Dqf.copies_left)
        if self.entry.journaled:
            self.ctx.counts.dqf_removed()


class _PurgeStep:
    """The timer of the dedupe purge's next step (a class, not a closure: a compiled
    module's timers call it by position)."""

    def __init__(self, dqf: Dqf, after: bytes | None) -> None:
        self.dqf = dqf
        self.after = after

    def __call__(self) -> None:
        self.dqf.purge_dedupe_keys(after=self.after)


def _ignore_error(error: JournalError | None) -> None:
    """A purge commit that failed deletes nothing: the next sweep finds the keys again."""
