"""Room: read DQF messages back into their queues — at start-up their seqs only,
from the DQF's key index, and a queue's cold backlog (mrs.group.backlog) a window at a time.

Why keys first: a server with a million messages in its DQF must serve within a
second or two of starting, and decoding every record took 12-40 s (and mapped in
every page of the file). Start-up reads the 12-byte keys (journals.dqf_index) into
each queue's cold backlog; `ColdReader` reads the records when the queue's window
runs low, with their delivery marks. So a record is checked when it is first read,
not at start-up: one that does not decode is left in place and reported then; one
that decodes but could never be delivered is quarantined to the DLJ
(mrs.group.quarantine) then. Until then both count as waiting in their queue's status.
"""

from __future__ import annotations

import logging
import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import groupby, islice
from operator import itemgetter

from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    Record,
    WriteBatch,
    decode_record,
    queue_key,
)
from journals.protocol import Store
from mrs.core.heap import trim
from mrs.core.seqspace import GROUP_SHIFT
from mrs.group.context import U32, UNPACK_U32, GroupContext
from mrs.group.dqf import PRIORITY_PREFIX, Dqf
from mrs.group.outbound import Outbound
from mrs.group.peers import Peers
from mrs.group.quarantine import quarantine_batch, record_problem
from mrs.group.queues import TargetQueue
from mrs.group.sequence import Sequence
from mrs.group.shapes import Entry, entry_from_record, fits_a_delivery, record_sound
from mrs.group.umas import Umas
from mrs.model import DEAD_LETTER_QUEUE

log = logging.getLogger("mrs.group")

KEYS_PER_CHUNK = 1 << 16
"""DQF keys turned into seqs at a time: a million keys never exist as objects at once."""
RELEASE_AFTER_BYTES = 1 << 20
"""Record bytes read back before the journal's pages are unmapped again (RSS flat:
within a few MB of an empty server's; a release costs ~1 ms per 4 MB mapped)."""
RELEASE_INTERVAL_S = 0.5
"""And this often whatever else mapped pages in (commits, bodies read at delivery)."""
TRIM_AFTER_BYTES = 64 << 20
"""Record bytes read back before a drained server trims its heap (mrs.core.heap): the
bodies that passed through leave free blocks glibc keeps (1M x 1 KiB drained: RssAnon
1.37x an empty server's). A trim costs tens of ms, so only after this much, and
only once no queue has a cold backlog left."""
_KEY = struct.Struct(">IQ")
DELIVERIES_MAX = 1 << 24
"""A delivery mark above this is damage, not a count (a message delivered 16M times):
read as is, the next delivery's count overflowed its 4 bytes and failed every get."""


@dataclass(eq=False)
class Recovery:
    ctx: GroupContext
    sequence: Sequence
    dqf: Dqf
    umas: Umas
    outbound: Outbound
    unconfigured: dict[int, dict[int, array]] = field(default_factory=dict)
    """queue -> priority -> seqs (seq order) of the DQF messages of queues the config
    does not have (removed from the file, or the DLQ switched off): kept in the DQF,
    counted in `mrs status`, and handed to the queue if `mrs admin add-queue` adds it
    back (`adopt`) or a restart finds it in the file again."""

    def __post_init__(self) -> None:
        self.pages = PageRelease(self.ctx.store)
        for queue in self.ctx.queues.values():
            queue.load_cold = ColdReader(
                self.ctx, queue.address.queue, self.umas.ack_after_restart, self.pages
            )

    def recover(self) -> None:
        """Count this start, reserve seqs (mrs.core.seqspace), and put the seq of every
        unconfirmed DQF message in its queue's cold backlog, in seq order."""
        ctx = self.ctx
        self.sequence.start()
        self.dqf.purge_dedupe_keys(now=True)
        ctx.counts.dlj_recounted(ctx.store.count(Journal.DLJ))
        self.outbound.recover()
        ctx.counts.dqf_added(ctx.store.count(Journal.DQF))
        recovered = 0
        priorities = stored_priorities(ctx.store)
        for queue_id, seqs in dqf_seqs(ctx.store):
            note_peer_seqs(self.outbound.peers, seqs)
            lanes = by_priority(seqs, priorities.get(queue_id))
            queue = ctx.queues.get(queue_id)
            if queue is None:
                kept = self.unconfigured.setdefault(queue_id, {})
                for priority, lane_seqs in lanes:
                    kept.setdefault(priority, array("Q")).extend(lane_seqs)
                continue
            for priority, lane_seqs in lanes:
                queue.pending.extend_cold(priority, lane_seqs)
            recovered += len(seqs)
        self.forget_priorities(priorities)  # what is left has no DQF record
        for queue_id in self.unconfigured:
            log.warning("%s", self._kept_line(queue_id))
        self.release_pages()
        trim()  # what growing the backlogs' arrays left in the heap
        log.info("group %d epoch %d: recovered %d DQF messages", ctx.group_id, ctx.epoch, recovered)

    def unconfigured_counts(self) -> dict[str, int]:
        """`G.Q` -> DQF messages kept for each queue the config does not have."""
        group_id = self.ctx.group_id
        return {
            f"{group_id}.{queue_id}": _kept_count(lanes)
            for queue_id, lanes in sorted(self.unconfigured.items())
        }

    def _kept_line(self, queue_id: int) -> str:
        """The one line that says where a removed queue's messages are and how to reach them."""
        group_id = self.ctx.group_id
        count = _kept_count(self.unconfigured[queue_id])
        if queue_id == DEAD_LETTER_QUEUE:
            back = "set dead_letter_queue = true and restart"
        else:
            back = f"add it back: `mrs admin add-queue {queue_id} NAME`, or the file and a restart"
        return (
            f"group {group_id}: the DQF keeps {count} messages for queue {group_id}.{queue_id}, "
            f"which the config does not have: not delivered until the queue is back ({back})"
        )

    def adopt(self, queue: TargetQueue) -> int:
        """Give a queue added at run time (mrs admin add-queue) the DQF messages kept
        for its id, before any new put reaches it: they are older, so they come first,
        as a restart would order them. How many it got."""
        lanes = self.unconfigured.pop(queue.address.queue, None)
        if not lanes:
            return 0
        for priority, seqs in sorted(lanes.items()):
            queue.pending.extend_cold(priority, seqs)
        count = _kept_count(lanes)
        log.info(
            "queue %s: %d messages the DQF kept for it are waiting on it", queue.address, count
        )
        return count

    def forget_priorities(self, left: dict[int, dict[int, int]]) -> None:
        """Delete the priority keys whose DQF record is gone (removed by a path that
        did not delete them: a quarantine, a dead letter): `left` after recovery."""
        batch = WriteBatch.empty()
        for queue_id, seqs in left.items():
            for seq in seqs:
                batch.delete(Journal.META, PRIORITY_PREFIX + queue_key(queue_id, seq))
        if not len(batch):
            return
        try:
            self.ctx.store.commit_now(batch)
        except JournalError as error:  # a full map: they are harmless, deleted next start
            log.warning("priority keys of removed messages not deleted: %s", error)

    def release_pages(self) -> None:
        """Unmap the journal's pages now and every RELEASE_INTERVAL_S; trim the heap
        once a large cold backlog has been read back and no queue has one left."""
        pages = self.pages
        pages.release()
        if pages.read_since_trim_bytes >= TRIM_AFTER_BYTES and not any(
            queue.pending.cold_count for queue in self.ctx.queues.values()
        ):
            pages.read_since_trim_bytes = 0
            trim()
        self.ctx.timers.call_later(RELEASE_INTERVAL_S, self.release_pages)


def dqf_seqs(store) -> Iterator[tuple[int, array]]:
    """(queue, seqs) runs in key order from the DQF's keys (never its records), a
    chunk of keys at a time; one queue's run may come in several pieces."""
    keys = store.keys(Journal.DQF)
    while chunk := list(islice(keys, KEYS_PER_CHUNK)):
        blob = b"".join(chunk)
        if len(blob) != _KEY.size * len(chunk):
            bad = [key for key in chunk if len(key) != _KEY.size]
            log.error("DQF keys not of a queue and a seq skipped: %s", bad[:5])
            blob = b"".join([key for key in chunk if len(key) == _KEY.size])
        for queue_id, pairs in groupby(_KEY.iter_unpack(blob), itemgetter(0)):
            yield queue_id, array("Q", map(itemgetter(1), pairs))


def note_peer_seqs(peers: Peers, seqs: array) -> None:
    """Raise each peer's `held_seq_max` to the highest of its seqs among `seqs` (one
    queue's run of DQF keys, in seq order: a seq carries its group in its high bits,
    so each group's seqs are one stretch, found by bisection)."""
    index, count = 0, len(seqs)
    while index < count:
        group_id = seqs[index] >> GROUP_SHIFT
        end = bisect_left(seqs, (group_id + 1) << GROUP_SHIFT, index)
        peer = peers.get(group_id)
        if peer is not None and seqs[end - 1] > peer.held_seq_max:
            peer.held_seq_max = seqs[end - 1]
        index = end


def stored_priorities(store) -> dict[int, dict[int, int]]:
    """queue -> seq -> priority of every stored message of priority > 0 (META keys
    written with the DQF record, mrs.group.dqf.PRIORITY_PREFIX)."""
    found: dict[int, dict[int, int]] = {}
    prefix, size = PRIORITY_PREFIX, len(PRIORITY_PREFIX)
    for key, value in store.raw_items(Journal.META):
        if key.startswith(prefix) and len(key) == size + _KEY.size and len(value) == 1:
            queue_id, seq = _KEY.unpack(key[size:])
            found.setdefault(queue_id, {})[seq] = value[0]
    return found


def _kept_count(lanes: dict[int, array]) -> int:
    """Messages kept for an unconfigured queue, over its priority lanes."""
    return sum(map(len, lanes.values()))


def by_priority(seqs: array, priorities: dict[int, int] | None) -> list[tuple[int, array]]:
    """Recovered seqs (seq order) split into their priority lanes, each in seq order;
    what `priorities` knew is popped from it (what is left has no record)."""
    if not priorities:
        return [(0, seqs)]
    lanes: dict[int, array] = {}
    for seq in seqs:
        priority = priorities.pop(seq, 0)
        lane = lanes.get(priority)
        if lane is None:
            lane = lanes[priority] = array("Q")
        lane.append(seq)
    return sorted(lanes.items())


def reloaded_entry(record: Record, times_delivered: int, ack: Callable[[Entry], None]) -> Entry:
    """A journaled message as its queue holds it: delivered `times_delivered` times
    before (POSSDUPL), and owed an MRS_ACK on confirm if its AK_CONF sender was local.
    Trusted (its Delivery built unchecked) when every field it gives one is in range."""
    entry = entry_from_record(record)
    entry.times_delivered = times_delivered
    entry.trusted = fits_a_delivery(record)
    if entry.response_queue is not None and entry.origin_group is None:
        entry.on_confirm = ack
    return entry


@dataclass(eq=False)
class PageRelease:
    """Unmaps the journal's pages after every RELEASE_AFTER_BYTES of records read back,
    so reading a backlog of any size leaves the server's resident size where it was."""

    store: Store
    read_bytes: int = 0
    read_since_trim_bytes: int = 0

    def read(self, size_bytes: int) -> None:
        self.read_bytes += size_bytes
        self.read_since_trim_bytes += size_bytes
        if self.read_bytes >= RELEASE_AFTER_BYTES:
            self.release()

    def release(self) -> None:
        self.read_bytes = 0
        self.store.release_pages()


@dataclass(eq=False)
class ColdReader:
    """Reads one queue's cold messages back from the DQF (TargetQueue.load_cold), and
    sets aside what cannot be delivered, since this is the first time it is read."""

    ctx: GroupContext
    queue_id: int
    ack: Callable[[Entry], None]
    pages: PageRelease

    def __call__(self, seqs: list[int]) -> list[Entry]:
        """The messages at `seqs`, read in two read transactions (records, marks)."""
        entries = []
        store = self.ctx.store
        read_bytes = 0
        keys = [queue_key(self.queue_id, seq) for seq in seqs]
        values = store.get_raw_many(Journal.DQF, keys)
        marks = store.get_raw_many(Journal.MARKS, keys)
        dqf = Journal.DQF.value
        for seq, key, value, mark in zip(seqs, keys, values, marks, strict=True):
            if value is None:
                log.error(
                    "DQF message %d of queue %d vanished from the journal", seq, self.queue_id
                )
                continue
            try:
                record = decode_record(value, dqf, key)
            except CorruptRecord as corrupt:
                self.ctx.report_corrupt(corrupt)
                continue
            read_bytes += len(record.body)
            if not record_sound(record) and (problem := record_problem(record)) is not None:
                self._quarantine(key, record, problem)
                continue
            if mark is None:
                times_delivered = 0
            elif len(mark) == U32.size and (count := UNPACK_U32(mark)[0]) <= DELIVERIES_MAX:
                times_delivered = count
            else:
                times_delivered = self._unreadable_mark(seq, mark)
            entries.append(reloaded_entry(record, times_delivered, self.ack))
        self.pages.read(read_bytes)
        return entries

    def _unreadable_mark(self, seq: int, mark: bytes) -> int:
        """A delivery mark that is not a count (damaged: marks carry no checksum) still
        says the message was handed out: it is delivered marked POSSDUPL, and reported.
        Raised, it failed the get with SERVER_ERROR and dropped every message read with
        it from the queue; a count near 2**32 failed every later delivery of it."""
        self.ctx.report_corrupt(
            f"delivery mark {mark.hex()[:16]} of DQF message {seq} of queue {self.queue_id} "
            "is not a count",
            "the message is delivered marked POSSDUPL",
        )
        return 1

    def _quarantine(self, key: bytes, record: Record, problem: str) -> None:
        """Move a record that cannot become a message from the DQF to the DLJ."""
        log.error("DQF message %d quarantined to the DLJ: %s", record.seq, problem)
        batch = quarantine_batch(record, problem)
        batch.delete(Journal.DQF, key).delete(Journal.MARKS, key)
        self.ctx.writer.submit(batch, _Quarantined(self.ctx, key, problem))


@dataclass(eq=False)
class _Quarantined:
    ctx: GroupContext
    key: bytes
    problem: str

    def __call__(self, error: JournalError | None) -> None:
        if error is not None:  # still in the DQF: read and quarantined again after a restart
            self.ctx.corrupt.append(f"dqf record {self.key.hex()}: {self.problem}")
            log.error("DQF record %s could not be quarantined: %s", self.key.hex(), error)
            return
        self.ctx.quarantined += 1
        self.ctx.counts.dlj_added()
        self.ctx.counts.dqf_removed()
