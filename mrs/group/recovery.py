"""Room: start-up — count this start, and reload every unconfirmed DQF message into its queue.

A record that does not decode is left in place and reported; one that decodes but
could never be delivered is quarantined to the DLJ (mrs.quarantine).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from journals import CorruptRecord, Journal, JournalError, WriteBatch, seq_key
from mrs.group.context import BODIES_IN_MEMORY_PER_QUEUE_MAX, U32, GroupContext
from mrs.group.dqf import Dqf
from mrs.group.outbound import Outbound
from mrs.group.sequence import Sequence
from mrs.group.umas import Umas
from mrs.model import Status
from mrs.quarantine import QUARANTINE_EXTRA, record_problem
from mrs.records import entry_from_record

log = logging.getLogger("mrs.group")


@dataclass(eq=False)
class Recovery:
    ctx: GroupContext
    sequence: Sequence
    dqf: Dqf
    umas: Umas
    outbound: Outbound

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
            entry = entry_from_record(item)
            entry.times_delivered = marks.get(key, 0)
            if entry.response_queue is not None and entry.origin_group is None:
                entry.on_confirm = self.umas.ack_after_restart
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
