"""The active's commit stream: each commit numbered, kept for the replicas, and its
answers held until the instances in sync have it.

Why here, around the writer and not in the rooms: every promise the group makes
("answered" means "durable") is kept by a batch's `done` callback, which the writer
runs once the commit is durable. Holding those callbacks until the commit is durable
on a majority of the group moves every promise (a WF put, a confirm, a SAF
hand-over, a link transfer) to "durable on a majority" at once, and the rooms stay
as they are. An unreplicated group never builds these parts: its writer is the plain
`InlineWriter`, exactly as fast as before.

`RecordingStore` wraps the journal store and seals every transaction it writes (the
writer's commits and the few `commit_now` writes, such as a seq block) into one
numbered record, in order, before its local flush, and the record goes out to the
replicas at once (`on_sealed`); `ReplicatedWriter` hands each commit's answers to the
stream once the local flush is done; `CommitStream` holds the records and the
answers, with the quorum rule:

- an answer goes out once `acks_needed` replicas of the in-sync set have acknowledged
  its record: with the active, a majority of the group (one replica of three). Why
  not every in-sync replica: an answer then waits for the slower of two replicas,
  and a replica that dies holds every answer until it is dropped (a second); the
  price is paid at failover instead, where a candidate must see the other replicas'
  positions (mrs.replication.coordinator `may_campaign`);
- the set is what etcd records (`coordinator`): a replica joins it once it has
  acknowledged every record sealed (etcd written first, then its acknowledgements
  count), and leaves it when it lags beyond REPLICATION_LAG_S_MAX or the backlog
  bounds, or its link has been down that long (`laggards`; its acknowledgements
  stop counting first, then etcd is written), and only while the replicas left
  hold every answer given: a dead replica must not stay
  listed, since a candidate would wait for its position. Fewer than `acks_needed`
  replicas in sync: nothing is answered; the active waits (the client's put times
  out) rather than answer from fewer disks than a majority.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from journals import InlineWriter, JournalError, JournalStore, WriteBatch
from journals.batch import JournalDeviceError, encode_batches
from journals.writer import Done
from mrs.core.seqspace import RESERVE_MAX
from mrs.limits import (
    REPLICATION_BACKLOG_BYTES_MAX,
    REPLICATION_BACKLOG_RECORDS_MAX,
    REPLICATION_LAG_S_MAX,
)
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules
from mrs.replication.wire import frame

SEQ_RESERVE_AHEAD: Final = RESERVE_MAX
"""How much further than the seq allocator asked an active's reservations reach (at
least a block, so the reservation before a block covers it): a failover or restart
skips at most this many seqs more, of 2**49."""


class SeqFence:
    """What an active's seq allocator may hand out (mrs.core.seqspace's `fence`).

    Why: the allocator hands seqs out of a block as soon as this instance has
    committed its reservation, and a seq leaves with a link transfer, an MRS_ACK or a
    notice without waiting for a replica. The next active counts from the reservation
    its journals hold; with a block its replicas never got (cut off, then lost) it
    gave the same seqs to other messages, and a peer that had the old active's took
    them for those (acknowledged messages lost, others delivered twice unmarked). So
    each reservation is written SEQ_RESERVE_AHEAD further than asked, and a block is
    handed out only while a reservation that reaches past it is on a majority: every
    next active counts above it. The term's first reservation is trusted: nothing
    leaves over a link before the records it sits among are on a majority (the links
    start then, mrs.server.links)."""

    ahead: Final = SEQ_RESERVE_AHEAD

    def __init__(self, stream: CommitStream) -> None:
        self.stream = stream
        self._first: int | None = None
        """The counter the term's first reservation reached."""
        self._durable = 0
        """The highest counter a reservation on a majority reached."""
        self._pending: deque[tuple[int, int]] = deque()
        """(record number, counter reached) of the reservations not yet on a majority:
        at most a few, since none is made beyond what those on a majority cover."""

    def committed(self, reached: int) -> None:
        """A reservation reaching `reached` was just committed (the stream's last record)."""
        if self._first is None:
            self._first = reached
        else:
            self._pending.append((self.stream.number, reached))

    def covered(self) -> int | None:
        """Counters below this may be handed out (None: no reservation yet this term)."""
        if self._first is None:
            return None
        answered = self.stream.answered
        while self._pending and self._pending[0][0] <= answered:
            self._durable = max(self._durable, self._pending.popleft()[1])
        return max(self._first, self._durable)


class RecordingStore:
    """The journal store of an active: each transaction it writes is sealed into the
    stream's next record once its writes are done and before its commit, so the
    replicas take it while this instance flushes (the stream's `on_sealed`).

    Why before: the answer waits for this instance's flush and a replica's, and the
    two happen one after the other when the record goes out after the local commit
    (an inline commit holds the loop: nothing is sent during it). The writes come
    first, so a full map is found before anything is sent (and the batches are
    committed one by one as in an unreplicated group); what fails after that is the
    flush itself, with the record already out: this instance's journals may now lack
    a record the replicas hold, so it answers none of what that commit carried and
    steps down (`lost`, `on_lost`), and a replica with every record takes over."""

    def __init__(self, store: JournalStore, stream: CommitStream) -> None:
        self._store = store
        self.stream = stream
        self.lost: JournalError | None = None
        """Set when a commit already sent failed here, or this device failed one
        (`_lose_device`): nothing more is written or answered."""
        self.on_lost: Callable[[str], None] = lambda why: None
        """Told once `lost` is set (the active steps down)."""
        self.seq_fence = SeqFence(stream)
        """What this active's seq allocator may hand out (mrs.core.seqspace)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def apply(self, batches: list[WriteBatch]) -> None:
        if self.lost is not None:
            raise self.lost
        sealed: list[bool] = []

        def seal() -> None:
            sealed.append(True)
            self.stream.seal(batches)

        try:
            self._store.apply(batches, seal)
        except JournalError as error:
            if sealed:
                self.lost = JournalError(f"a commit sent to the replicas failed here: {error}")
                self.on_lost(str(self.lost))
            elif isinstance(error, JournalDeviceError):
                self._lose_device(error)
            raise
        if sealed and self.stream.on_flushed is not None:
            self.stream.on_flushed(self.stream.number)

    def commit_now(self, batch: WriteBatch) -> None:
        self.apply([batch])

    def _lose_device(self, error: JournalDeviceError) -> None:
        """This instance's device failed a commit before it was sent (its data
        directory deleted or replaced under it, a write refused): step down and answer
        none of it, as for a failed flush. Why: answered, each put in it was told
        DQF_DEVICE_FAIL (its DLJ on the same device failing too) and each confirm
        JOURNAL_FAIL, though the replicas' disks could store them; unanswered, the
        clients send them again to the replica that takes over. A full map is not
        this: every instance holds the same journals, so a new active would refuse
        them as well."""
        self.lost = JournalError(f"its journals failed a commit: {error}")
        self.on_lost(str(self.lost))


@dataclass(frozen=True, slots=True)
class Bridge:
    """How a promoted replica brings the other replicas of its old term up to where
    it was promoted from, instead of sending each a full copy of the journals.

    Why it is sound: the replicas of one term applied the same records in the same
    order, so one at (term, m) that is whole (no copy half replayed) holds what the
    promoted one held at (term, m); the records m+1..base (kept in memory by the
    promoted one while it was a replica, `mrs.replication.replica.RecentRecords`)
    and a rebase make it hold what the new active started its term from, and the new
    term's records follow. An instance that led the old term (its position says
    nothing of what it committed as the active), one whose copy is not whole, or one
    further behind than the records kept gets a full copy as before."""

    base: tuple[int, int]
    """The promoted instance's position when it won ((0, 0): no bridge)."""
    records: list[tuple[int, list[Any]]]
    """(number, encoded batches) of the base's term, ending at the base's number."""

    def frames(self, position: tuple[int, int], term: int) -> list[bytes] | None:
        """The frames that bring a replica at `position` to (term, 0), or None."""
        base_term, base_number = self.base
        old_term, number = position
        if base_term == 0 or old_term != base_term or number > base_number:
            return None
        needed = [(n, batches) for n, batches in self.records if n > number]
        if len(needed) != base_number - number:
            return None  # some are no longer kept
        base = list(self.base)
        bridge = [
            frame({"t": "bridge", "term": term, "base": base, "n": n, "batches": batches})
            for n, batches in needed
        ]
        return [*bridge, frame({"t": "rebase", "term": term, "base": base})]


@dataclass(slots=True)
class _Record:
    number: int
    frame: bytes
    sealed_s: float


@dataclass
class CommitStream:
    """The records of one term and the answers waiting for them (no I/O)."""

    term: int
    replicas: tuple[str, ...]
    deliver: Callable[[list[Done]], None]
    """Runs answers' callbacks (the server's, so the answers go out at once)."""
    clock_s: Callable[[], float] = trio.current_time
    number: int = 0
    records: deque[_Record] = field(default_factory=deque)
    waiting: deque[tuple[int, list[Done]]] = field(default_factory=deque)
    acked: dict[str, int] = field(default_factory=dict)
    in_sync: set[str] = field(default_factory=set)
    acks_needed: int = 1
    """Replicas of `in_sync` an answer waits for: with the active, a majority."""
    answered: int = 0
    """The last record whose answers went out (the replicas kept in sync hold it)."""
    answering: bool = True
    """False once the active steps down: nothing it holds is answered any more."""
    released: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) at every acknowledgement and in-sync change (`wake_waiters`)."""
    backlog_bytes: int = 0
    rules: ReplicationRules = KEPT_REPLICATION
    """Which commit may be answered (a harness may hand a broken build)."""
    bridge: Bridge | None = None
    """The promoted instance's old-term records, until every replica is past them."""
    on_sealed: Callable[[int, bytes], None] | None = None
    """Told (number, frame) of each record as it is sealed, before the local flush:
    the active writes it to the sockets of the replicas an answer waits for there
    (mrs.replication.link_out)."""
    on_flushed: Callable[[int], None] | None = None
    """Told the number of a record once it is durable here: the active writes it to
    the other replicas' sockets then."""
    on_answering_again: Callable[[], None] | None = None
    """Told when answers resume after a refused hand-over (`answer_again`): the writer
    commits what it held meanwhile."""

    def seal(self, batches: list[WriteBatch]) -> None:
        """Number and keep the record of one transaction (`batches`, written and not
        yet flushed here), and tell `on_sealed`."""
        if not batches:
            return
        self.number += 1
        body = frame(
            {"t": "commit", "term": self.term, "n": self.number, "batches": encode_batches(batches)}
        )
        self.records.append(_Record(self.number, body, self.clock_s()))
        self.backlog_bytes += len(body)
        self._trim()
        if self.on_sealed is not None:
            self.on_sealed(self.number, body)

    def hold(self, dones: list[Done]) -> None:
        """Hold `dones` (answers durable here) until the record sealed last is durable
        on a majority (at once if it already is)."""
        if dones:
            self.waiting.append((self.number, dones))
        self.release()

    def _trim(self) -> None:
        """Keep the records some replica may still need, within the backlog bounds."""
        oldest_needed = min((self.acked.get(r, 0) for r in self.replicas), default=self.number)
        while self.records and (
            self.records[0].number <= oldest_needed
            or len(self.records) > REPLICATION_BACKLOG_RECORDS_MAX
            or self.backlog_bytes > REPLICATION_BACKLOG_BYTES_MAX
        ):
            self.backlog_bytes -= len(self.records.popleft().frame)

    def ack(self, name: str, number: int) -> bool:
        """`name` has every record up to `number`; True when it has just caught up and
        may join the in-sync set."""
        if number > self.acked.get(name, -1):
            self.acked[name] = number
        if self.bridge is not None and all(r in self.acked for r in self.replicas):
            self.bridge = None  # every replica is in this term now
        self.release()
        self.wake_waiters()
        return name not in self.in_sync and self.acked.get(name, 0) >= self.number

    def wake_waiters(self) -> None:
        """Wake whoever waits on `released`: an acknowledgement came, or the in-sync
        set changed (a planned hand-over waits for either)."""
        self.released.set()
        self.released = trio.Event()

    async def wait_answered(self, number: int) -> None:
        """Return once record `number` is as durable as an answer needs (on a majority
        of the group: `answered` reached it). Why: what the group tells another group
        before that (a link's Welcome naming its journals' incarnation) could rest on
        a record a failover loses. Waits for ever once the active stops answering
        (stepping down cancels the waiter with the server)."""
        while self.answered < number:
            await self.released.wait()

    def durable_on_majority(self) -> int:
        """The last record `acks_needed` in-sync replicas have (0 while fewer are in sync)."""
        return self.durable_on(self.in_sync)

    def durable_on(self, replicas: set[str]) -> int:
        """The last record `acks_needed` of `replicas` have acknowledged."""
        if len(replicas) < self.acks_needed:
            return 0
        acks = sorted((self.acked.get(name, 0) for name in replicas), reverse=True)
        return acks[self.acks_needed - 1]

    def release(self) -> None:
        """Answer every held commit a majority has."""
        if not self.answering:
            return
        durable = self.rules.answerable(self)
        self.answered = max(self.answered, durable)
        ready: list[Done] = []
        while self.waiting and self.waiting[0][0] <= durable:
            ready.extend(self.waiting.popleft()[1])
        if ready:
            self.deliver(ready)

    def answer_again(self) -> None:
        """Answers resume (a planned hand-over was refused): what a majority holds is
        answered, and the writer commits the requests it held meanwhile."""
        self.answering = True
        self.release()
        if self.on_answering_again is not None:
            self.on_answering_again()

    def unanswered_since_s(self) -> float:
        """When the oldest record an answer still waits for was sealed (inf: none
        waits, or that record is no longer kept)."""
        if not self.waiting or not self.records:
            return math.inf
        index = self.waiting[0][0] - self.records[0].number
        return self.records[index].sealed_s if 0 <= index < len(self.records) else math.inf

    def laggards(self, unreachable: Collection[str] = ()) -> list[str]:
        """In-sync replicas to drop: missing a record sealed longer ago than the lag
        bound (or beyond the backlog), or `unreachable` (their link down longer than
        the lag bound, though they miss no record), and only while the replicas left
        still hold every answer given (`acks_needed` of them have `answered`).

        Why `unreachable`: in a group that writes nothing, a dead replica misses no
        record, so it stayed named in sync for good, and when the active was lost
        next, the replica left waited for the dead one's position: the group down
        until it came back, though the one left held every answer (found by a probe,
        tests/process/test_replicated_ops_23.py)."""
        now_s = self.clock_s()
        kept = set(self.in_sync)
        dropped: list[str] = []
        for name in sorted(self.in_sync):
            acked = self.acked.get(name, 0)
            if name not in unreachable:
                if acked >= self.number:
                    continue
                missing = next((r for r in self.records if r.number > acked), None)
                late = missing is None or now_s - missing.sealed_s > REPLICATION_LAG_S_MAX
                if not late and self.number - acked <= REPLICATION_BACKLOG_RECORDS_MAX:
                    continue
            rest = kept - {name}
            if self.durable_on(rest) >= self.answered and len(rest) >= self.acks_needed:
                kept = rest
                dropped.append(name)
        return dropped

    def frames_for(self, position: tuple[int, int], led: int, whole: bool) -> list[bytes] | None:
        """What to send a replica that says it is at `position` (having led term
        `led`, its copy `whole` or not): the records after it, a bridge from the
        term before and this term's records, or None (a full copy)."""
        term, number = position
        if term == self.term:
            return self.records_after(number)
        if self.bridge is None or term == led or not whole:
            return None
        bridged = self.bridge.frames(position, self.term)
        after = self.records_after(0)
        return None if bridged is None or after is None else [*bridged, *after]

    def frame_of_last(self, number: int) -> bytes | None:
        """The frame of record `number` if it is the last one sealed and still kept."""
        last = self.records[-1] if self.records else None
        return last.frame if last is not None and last.number == number else None

    def records_after(self, number: int) -> list[bytes] | None:
        """The frames of every record after `number`; None when some are no longer
        kept (the replica needs a full copy)."""
        if number == self.number:
            return []
        if not self.records or self.records[0].number > number + 1 or number > self.number:
            return None
        return [r.frame for r in self.records if r.number > number]

    def backlog(self, name: str) -> tuple[int, int]:
        """(records, bytes) sealed and not acknowledged by `name` (of those kept)."""
        acked = self.acked.get(name, 0)
        pending = [r for r in self.records if r.number > acked]
        return self.number - acked, sum(len(r.frame) for r in pending)


class ReplicatedWriter(InlineWriter):
    """The inline writer of an active instance: commits as before (each transaction
    sealed into the stream on its way, `RecordingStore`), then hands the commit's
    answers to the stream instead of running them."""

    def __init__(self, store: RecordingStore, wake: Callable[[], None], stream: CommitStream):
        super().__init__(store, wake)  # type: ignore[arg-type]  # a Store by delegation
        self.recording = store
        self.stream = stream
        self._durable_here: list[Done] = []
        stream.on_answering_again = wake

    def submit(self, batch: WriteBatch, done: Done, can_wait: bool = False) -> None:
        def durable_here(error: Any) -> None:
            if error is None:
                self._durable_here.append(done)
            elif self.recording.lost is None:
                done(error)  # not stored anywhere: answered at once, as before
            # else: the replicas may hold it; this instance answers nothing more

        super().submit(batch, durable_here, can_wait)

    def commit_pending(self) -> None:
        """Commit what is pending, unless the active has stopped answering (a planned
        hand-over's last steps, a step-down, a stop): what it holds then stays
        uncommitted, and its clients send it again to the next active. Why: a commit
        made then still reached the replicas, and a get's delivery mark in it made
        the next active deliver that message POSSDUPL though nobody had had it
        (docs/replication.md promises none); a put or a confirm in it was never
        answered either way. A hand-over refused answers again and commits it."""
        if not self.stream.answering:
            return
        super().commit_pending()
        dones, self._durable_here = self._durable_here, []
        self.stream.hold(dones)
