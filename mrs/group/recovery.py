"""Room: read DQF messages back into their queues — all of them at start-up, and a
queue's cold backlog (mrs.backlog) a window at a time.

A record that does not decode is left in place and reported; one that decodes but
could never be delivered is quarantined to the DLJ (mrs.quarantine).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from journals import CorruptRecord, Journal, JournalError, Record, WriteBatch, queue_key, seq_key
from mrs.group.context import BODIES_IN_MEMORY_PER_QUEUE_MAX, U32, GroupContext
from mrs.group.dqf import Dqf
from mrs.group.outbound import Outbound
from mrs.group.sequence import Sequence
from mrs.group.umas import Umas
from mrs.model import Status
from mrs.quarantine import QUARANTINE_EXTRA, record_problem
from mrs.queues import Entry
from mrs.records import entry_from_record

log = logging.getLogger("mrs.group")


@dataclass(eq=False)
class Recovery:
    ctx: GroupContext
    sequence: Sequence
    dqf: Dqf
    umas: Umas
    outbound: Outbound

    def __post_init__(self) -> None:
        for queue in self.ctx.queues.values():
            queue.load_cold = ColdReader(self.ctx, queue.address.queue, self.umas.ack_after_restart)

    def recover(self) -> None:
        """Count this start, reserve seqs (mrs.seqspace), and reload every unconfirmed
        DQF message into its queue."""
        ctx = self.ctx
        self.sequence.start()
        self.dqf.purge_dedupe_keys(now=True)
        ctx.dlj_count = ctx.store.count(Journal.DLJ)
        self.outbound.recover()
        marks = {key: U32.unpack(value)[0] for key, value in ctx.store.raw_items(Journal.MARKS)}
        recovered = 0
        for key, item in ctx.store.scan(Journal.DQF):
            if isinstance(item, CorruptRecord):
                ctx.report_corrupt(item)
                ctx.dqf_count += 1
                continue
            if (problem := record_problem(item)) is not None:
                self._quarantine_record(key, item, problem)
                continue
            ctx.dqf_count += 1
            queue = ctx.queues.get(item.target_queue)
            if queue is None:
                log.warning(
                    "DQF message %d for unconfigured queue %d kept, not delivered",
                    item.seq,
                    item.target_queue,
                )
                continue
            entry = reloaded_entry(item, marks.get(key, 0), self.umas.ack_after_restart)
            if len(queue.pending) >= BODIES_IN_MEMORY_PER_QUEUE_MAX:
                entry.body = None
            queue.put_back(entry, front=False)
            recovered += 1
        log.info("group %d epoch %d: recovered %d DQF messages", ctx.group_id, ctx.epoch, recovered)

    def _quarantine_record(self, key: bytes, record, problem: str) -> None:
        """At start-up: move a DQF record that cannot become a message to the DLJ."""
        ctx = self.ctx
        record.reason = int(Status.BADPARAM)
        record.extra = {**(record.extra or {}), QUARANTINE_EXTRA: problem}
        batch = WriteBatch.empty().put_record(Journal.DLJ, seq_key(record.seq), record)
        batch.delete(Journal.DQF, key).delete(Journal.MARKS, key)
        try:
            ctx.store.commit_now(batch)
        except JournalError as error:
            ctx.dqf_count += 1
            ctx.corrupt.append(f"dqf record {key.hex()}: {problem}")
            log.error(
                "DQF message %d cannot be delivered (%s) nor quarantined (%s); left in place",
                record.seq,
                problem,
                error,
            )
            return
        ctx.dlj_count += 1
        ctx.quarantined += 1
        log.error("DQF message %d quarantined to the DLJ: %s", record.seq, problem)


def reloaded_entry(record: Record, times_delivered: int, ack: Callable[[Entry], None]) -> Entry:
    """A journaled message as its queue holds it: delivered `times_delivered` times
    before (POSSDUPL), and owed an MRS_ACK on confirm if its AK_CONF sender was local."""
    entry = entry_from_record(record)
    entry.times_delivered = times_delivered
    if entry.response_queue is not None and entry.origin_group is None:
        entry.on_confirm = ack
    return entry


@dataclass(eq=False, slots=True)
class ColdReader:
    """Reads one queue's cold messages back from the DQF (TargetQueue.load_cold)."""

    ctx: GroupContext
    queue_id: int
    ack: Callable[[Entry], None]

    def __call__(self, seqs: list[int]) -> list[Entry]:
        entries = []
        store = self.ctx.store
        for seq in seqs:
            key = queue_key(self.queue_id, seq)
            try:
                record = store.get(Journal.DQF, key)
            except CorruptRecord as corrupt:
                self.ctx.report_corrupt(corrupt)
                continue
            if record is None:
                log.error(
                    "DQF message %d of queue %d vanished from the journal", seq, self.queue_id
                )
                continue
            marks = store.get_raw(Journal.MARKS, key)
            times_delivered = U32.unpack(marks)[0] if marks is not None else 0
            entries.append(reloaded_entry(record, times_delivered, self.ack))
        return entries
