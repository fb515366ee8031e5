"""Target queues in memory: what waits to be got, what waits to be confirmed, who waits.

A queue knows nothing of sockets or journals. It holds `Entry`s (a message plus the
callbacks its sender waits on) by priority, highest first, then in arrival order
(mrs.group.lanes), the delivered but unconfirmed ones in delivery order, and the
gets parked until something arrives; a selective get takes the first message its
selection matches, found through the queue's index (mrs.group.select_index)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain, islice
from operator import attrgetter
from typing import Final

from mrs.config.bus import QueueConfig
from mrs.core.selection import Selection
from mrs.group.backlog import REFILL_BELOW, REFILL_MIN, WINDOW_ENTRIES_MAX, Loader
from mrs.group.lanes import Lane, PriorityLanes
from mrs.group.queue_stores import QueueStores
from mrs.group.select_index import SelectIndex
from mrs.group.shapes import Entry
from mrs.limits import (
    JOURNALED_BODIES_BYTES_MAX,
    LENT_BYTES_MAX,
    LENT_REMEMBERED_MAX,
    PRIORITY_MAX,
    SELECT_SCAN_MESSAGES_MAX,
)
from mrs.model import DEAD_LETTER_QUEUE, Address, ConfirmStyle, InterestPoint

_ACK_POINT: Final = InterestPoint.ACK
_RECOVERED_CHUNK: Final = 1024
"""Cold records read at a time when a queue's first selective get builds its index."""
_seq_of: Final = attrgetter("seq")
"""An entry's seq, for a lazy `map` over a lane's window (a generator expression is a
list once compiled)."""


def lane_of(entry: Entry) -> int:
    """The lane (priority) an entry waits in: a priority outside 0..99 (a record
    written by something else) waits with priority 0."""
    priority = entry.priority
    return priority if 0 <= priority <= PRIORITY_MAX else 0


def _no_timer() -> None:
    """A get with no timer to cancel (a lambda cannot be a compiled default)."""


@dataclass(eq=False)
class GetWaiter:
    """A get parked on an empty queue."""

    deliver: Callable[..., bool | None]
    """deliver(entry, premarked=False); False: the entry could not be delivered and
    the get still waits. premarked: its delivery mark was committed with the message."""
    session_id: int
    request_id: int = 0
    cancel_timer: Callable[[], None] = _no_timer
    reserved: bool = False
    """Taken by a message whose commit is under way (`TargetQueue.reserve_waiter`)."""
    timed_out: Callable[[], None] | None = None
    """Set if its timeout passed while reserved: TIMEOUT if that message never comes."""
    select: Selection | None = None
    """A selective get: woken only by a message this matches (None: any message)."""
    looked: bool = True
    """A selective get that looked at the messages waiting when it parked and found
    none it may take: `serve_waiters` asks it again only once a message came back
    (`TargetQueue.selective_recheck`). False: parked at the unconfirmed cap unlooked,
    or its look stopped at SELECT_SCAN_MESSAGES_MAX (`SelectIndex.cut`): asked again
    at each serve. Why: a match beyond the messages it saw comes within its reach
    as the ones before are taken, and nothing else would ask it; it waited out its
    timeout, or for ever, beside a message it matched."""

    def __init__(
        self,
        deliver: Callable[..., bool | None],
        session_id: int,
        request_id: int = 0,
        cancel_timer: Callable[[], None] = _no_timer,
        reserved: bool = False,
        timed_out: Callable[[], None] | None = None,
        select: Selection | None = None,
        looked: bool = True,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.deliver = deliver
        self.session_id = session_id
        self.request_id = request_id
        self.cancel_timer = cancel_timer
        self.reserved = reserved
        self.timed_out = timed_out
        self.select = select
        self.looked = looked


def _always_ready(entry: Entry) -> bool:
    return True


@dataclass(eq=False)
class TargetQueue:
    config: QueueConfig
    address: Address
    pending: PriorityLanes[Entry] = field(default_factory=PriorityLanes)
    """What waits to be got, one lane per priority (mrs.group.lanes): each a window in
    memory, then its cold backlog (journaled messages as seqs, mrs.group.backlog)."""
    unconfirmed: dict[int, Entry] = field(default_factory=dict)
    waiters: deque[GetWaiter] = field(default_factory=deque)
    selective_waiters: int = 0
    """Of `waiters`, those with a selection (0: the first waiter takes any message)."""
    selective_recheck: bool = False
    """A message a parked selective get may take may wait unoffered to it: one went
    back to its place (`put_back`), or came in past the selection index's bound.
    Why: every confirm served the waiters, and each parked selective get looked
    again through up to SELECT_SCAN_MESSAGES_MAX messages, so a thousand of them
    parked beside messages they never match stalled the whole group at each confirm
    (benchmarks/README.md). A message that arrives is matched against each (`offer`)."""
    parked_by: dict[int, int] = field(default_factory=dict)
    """On the shared DLQ: session id -> its gets in `waiters` (`parked`). Why: the
    guard parked_gets_max is per connection, and on the DLQ `waiters` holds every
    reader's: one reader's 1,000 parked gets had every other reader's get (the DLQ
    handler's) refused EXCEEDQUOTA."""
    index: SelectIndex = field(default_factory=SelectIndex)
    """Attributes of every pending message, for selective gets (mrs.group.select_index)."""
    attached_session: int | None = None
    memory_count: int = 0
    """Nonrecoverable messages waiting in `pending` (what messages_max bounds)."""
    memory_bytes: int = 0
    """Their bodies' bytes (what the guard queue_bytes_max bounds)."""
    journaled_body_bytes: int = 0
    """Bodies of journaled entries in `pending` kept in memory (a cache of the DQF)."""
    arrivals: int = 0
    load_cold: Loader | None = None
    """Reads cold messages back from the DQF; None keeps every entry in memory."""
    stores: QueueStores = field(default_factory=QueueStores)
    """DQF stores for this queue under way, and how many took a parked get with them
    (`reserve_waiter`): their one owner (mrs.group.queue_stores)."""
    lent: OrderedDict[int, Entry] = field(default_factory=OrderedDict)
    """Entries needing no confirm lent to the queue's client (read ahead beyond a
    GetBatch's count, or handed to a get), by seq, oldest first (given back by
    `give_back`; bounded by LENT_*). Forgotten at the detach of a client that gave
    back (a clean close); kept across a lost connection, whose client still holds them
    and gives them back from its next connection (`detach`). An OrderedDict: a
    dict's oldest key after many front pops scans the holes (1.9 against 0.4 µs)."""
    lent_bytes: int = 0
    gave_back: bool = False
    """The attached client sent a GiveBack (it closes): `detach` forgets `lent`."""
    confirms_failed: set[int] = field(default_factory=set)
    """Seqs whose confirm's commit failed and that wait in `unconfirmed` again
    (`restore_unconfirmed`); touched only when a commit fails and at detach."""
    marking: dict[int, int] = field(default_factory=dict)
    """On a queue that confirms implicitly: seqs handed to a get whose delivery mark
    is still being committed (its Delivery not sent yet), each with how many such
    commits are under way. The next get's implicit confirm leaves them alone: their
    get may yet fail (JOURNAL_FAIL), and a confirm taken with them deleted a message
    nobody had received (mrs.group.handover)."""
    shared: bool = field(init=False)
    """The DLQ: several handlers read it, each get a lease (mrs.group.dlq_leases)."""
    confirm_style: ConfirmStyle = field(init=False)
    unconfirmed_max: int = field(init=False)

    def __post_init__(self) -> None:
        self.shared = self.address.queue == DEAD_LETTER_QUEUE
        self.confirm_style = self.config.confirm  # read per confirm: native, not config's
        self.unconfirmed_max = self.config.unconfirmed_max  # per delivery, likewise

    @property
    def waiting(self) -> int:
        """Messages waiting to be got: the windows in memory and the cold backlogs."""
        return self.pending.count + self.pending.cold_count

    @property
    def drained(self) -> bool:
        """Gets are parked, no message waits: a confirm answered later holds none up."""
        return bool(self.waiters) and not self.pending.count and not self.pending.cold_count

    @property
    def active(self) -> bool:
        """Whether nonrecoverable messages may be queued here now (a put, an MRS_ACK, a
        returned message): a permanent queue always, a temporary one (`permanent =
        false`) only while attached. MessageQ's temporary queue exists only while its
        program is attached: one for it then is NOTACTIVE, not kept for nobody."""
        return self.config.permanent or self.attached_session is not None

    def can_deliver(self) -> bool:
        """False while unconfirmed_max (with reserved deliveries) await a confirm."""
        return len(self.unconfirmed) + self.stores.reserved < self.unconfirmed_max

    def reserve_waiter(self) -> GetWaiter | None:
        """The parked get an arriving journaled message may take with it, or None: its
        delivery mark then joins the message's own transaction (one commit, not two).
        Only when arrival order allows: nothing waits in memory or cold, and every
        store under way here reserved a get too (delivered in commit order); and not
        for a selective get (the message is offered to it once durable). The store
        that takes it counts it (`QueueStores.submitted`)."""
        if not self.waiters or self.pending.count or self.pending.cold_count:
            return None  # asked first: the common put, no get parked
        if not self.stores.all_took_gets() or self.selective_waiters or not self.can_deliver():
            return None
        waiter = self.waiters.popleft()
        waiter.reserved = True
        return waiter

    def offer(self, entry: Entry) -> None:
        """Add an arriving entry: hand it to a parked get that may have it now (nothing
        it could take waits before it, and the unconfirmed cap allows), or queue it
        in its priority lane."""
        asked = False
        if self.waiters and self.can_deliver():
            waiter = self._waiter_for(entry)
            asked = True  # every parked get was asked: none that looked may take it
            if waiter is not None:
                # Numbered as if queued: put back later (its receiver left, its mark
                # failed, given back), it returns to its place, after what arrived
                # before it. Unnumbered (0) it went before them all: a selective get's
                # match came again ahead of the older messages it had passed over.
                self.arrivals += 1
                entry.arrival = self.arrivals
                self.index.number(entry)
                if waiter.select is not None and self.pending.cold_count:
                    # Older ones of its lane may wait on disk: its place is among them.
                    self.pending.pass_cold(entry, lane_of(entry))
                self._deliver_to_waiter(entry, waiter)
                return
        recheck = self.selective_recheck
        self.put_back(entry, front=False)
        if asked:
            self.selective_recheck = recheck

    def _waiter_for(self, entry: Entry) -> GetWaiter | None:
        """The first parked get that may take `entry`: a plain get only when nothing
        else waits (it would have taken that), a selective get when it matches."""
        empty = not self.pending.count and not self.pending.cold_count
        if not self.selective_waiters:
            return self.waiters[0] if empty else None
        for waiter in self.waiters:
            if waiter.reserved:
                continue
            select = waiter.select
            if select is None:
                if empty:
                    return waiter
            elif select.matches(entry):
                return waiter
        return None

    def _deliver_to_waiter(self, entry: Entry, waiter: GetWaiter) -> None:
        first = self.waiters[0] is waiter
        if first:
            self.waiters.popleft()
        else:
            self.waiters.remove(waiter)
        if self.shared:
            self._count_parked(waiter.session_id, -1)
        if waiter.select is not None:
            self.selective_waiters -= 1
        if waiter.deliver(entry) is False:  # not delivered (quarantined): still waiting
            self._repark(waiter, first)
        else:
            waiter.cancel_timer()

    def _repark(self, waiter: GetWaiter, first: bool = True) -> None:
        if first:
            self.waiters.appendleft(waiter)
        else:
            self.waiters.append(waiter)
        if self.shared:
            self._count_parked(waiter.session_id, 1)
        if waiter.select is not None:
            self.selective_waiters += 1

    def serve_waiters(self, ready: Callable[[Entry], bool] = _always_ready) -> None:
        """Hand waiting entries to parked gets, oldest get first, each the message it
        may take, while the unconfirmed cap allows: for whenever a delivery becomes
        possible again (a confirm; a delivery that failed and put its entry back).
        `ready(entry)` False skips an entry that cannot be delivered (e.g. its body
        is unreadable)."""
        if self.selective_waiters:
            self._serve_selective(ready)
            return
        while self.waiters and self.can_deliver():
            entry = self.take()
            if entry is None:
                return
            if not ready(entry):
                continue
            self._deliver_to_waiter(entry, self.waiters[0])

    def _serve_selective(self, ready: Callable[[Entry], bool]) -> None:
        """Each parked get in turn takes the first message it may take, if any: a
        selective one that already looked only when one came back since
        (`selective_recheck`)."""
        recheck = self.selective_recheck
        self.selective_recheck = False
        for waiter in list(self.waiters):
            if not self.can_deliver():
                self.selective_recheck = self.selective_recheck or recheck
                return
            if waiter.select is not None and waiter.looked and not recheck:
                continue
            if waiter.reserved or waiter not in self.waiters:
                continue
            while (entry := self.take(waiter.select)) is not None and not ready(entry):
                pass
            if entry is not None:
                self._deliver_to_waiter(entry, waiter)
            else:
                waiter.looked = not self.index.cut

    def put_back(self, entry: Entry, front: bool = True) -> None:
        """Queue an entry without offering it to waiters. front: it was taken before
        and goes back to its place in its lane's arrival order (before everything of
        its priority that came later, after all that came before and still waits):
        in the cold backlog if it was taken from there (`_restored_cold`), else in
        the window (`_arrival_place`)."""
        if self.selective_waiters:
            self.selective_recheck = True
        priority = lane_of(entry)
        self.index.add(entry, priority)
        if front:
            if self.pending.restore_cold(entry, priority):
                self._restored_cold(entry)
                return
            self.pending.insert(entry, priority, self._arrival_place(entry, priority))
        elif self._goes_cold(entry, priority):
            self.pending.append_cold(entry, priority, self._can_go_cold(entry))
            entry.body = None if entry.journaled else entry.body  # on disk: read back later
            if entry.journaled:
                return
        else:
            self.arrivals += 1
            entry.arrival = self.arrivals
            self.pending.append(entry, priority)
            if (
                entry.journaled
                and entry.body is not None
                and self.journaled_body_bytes + len(entry.body) > JOURNALED_BODIES_BYTES_MAX
            ):
                entry.body = None  # on disk already: read back at delivery
        if entry.journaled:
            self.journaled_body_bytes += len(entry.body or b"")
        else:
            self.memory_count += 1
            size = len(entry.body or b"")
            self.memory_bytes += size
            if entry.account is not None:
                entry.account.held_bytes += size

    def _count_journaled_body(self, entry: Entry) -> None:
        """A journaled entry back in the window after it was delivered (`detach`): its
        body counts, or goes back to disk (read at delivery) beyond
        JOURNALED_BODIES_BYTES_MAX. Why: a reader holding 600 unconfirmed 1 MB messages
        that left gave them all back with their bodies, and the queue kept 600 MB in
        memory until they were got again (unconfirmed_max is 1,000 by default)."""
        body = entry.body
        if body is not None and self.journaled_body_bytes + len(body) > JOURNALED_BODIES_BYTES_MAX:
            entry.body = None
            return
        self.journaled_body_bytes += len(body or b"")

    def _restored_cold(self, entry: Entry) -> None:
        """`entry`, taken from its lane's cold backlog (or handed out as it arrived
        behind it), waits there again at its arrival place (`PriorityLanes.restore_cold`):
        a journaled body goes back to disk (read at delivery), a memory one counts.
        Before, it went to the front of its lane's window, ahead of the older messages
        still on disk: a selective get's message came again before them."""
        if entry.journaled:
            entry.body = None
            return
        self.memory_count += 1
        size = len(entry.body or b"")
        self.memory_bytes += size
        if entry.account is not None:
            entry.account.held_bytes += size

    def _arrival_place(self, entry: Entry, priority: int) -> int:
        """Where in its lane's window an entry taken before goes back: before the first
        waiting entry that arrived after it (the front for one never numbered)."""
        window = self.pending.lane(priority).window
        if not window or window[0].arrival > entry.arrival:
            return 0
        return next(
            (i for i, waiting in enumerate(window) if waiting.arrival > entry.arrival),
            len(window),
        )

    def _goes_cold(self, entry: Entry, priority: int) -> bool:
        """Behind cold ones of its lane (arrival order), or journaled beyond the window."""
        if self.load_cold is None:
            return False
        if self.pending.has_cold(priority):
            return True
        return self.pending.count >= WINDOW_ENTRIES_MAX and self._can_go_cold(entry)

    @staticmethod
    def _can_go_cold(entry: Entry) -> bool:  # ColdBacklog.can_go_cold, on native fields
        return entry.journaled and entry.on_confirm is None and entry.on_dequeue is None

    def _refill(self, lane: Lane[Entry]) -> None:
        """Read the lane's next cold messages back into its window, in arrival order;
        at least REFILL_MIN when the window is full of other lanes."""
        load = self.load_cold
        assert load is not None  # nothing goes cold without a loader (_goes_cold)
        pending = self.pending
        while lane.cold.count:
            room = WINDOW_ENTRIES_MAX - pending.count
            if room <= 0:
                if lane.window:
                    return
                room = REFILL_MIN
            before = lane.cold.count
            start = self.arrivals
            order: list[int] = []
            taken = lane.cold.take(room, self._bodies_bounded(load), order)
            for entry in taken:
                self.arrivals += 1
                entry.arrival = self.arrivals
                lane.window.append(entry)
                pending.count += 1
                self.index.add(entry, lane.priority)  # a recovered one is known now
                if entry.journaled and entry.body is not None:
                    if self.journaled_body_bytes + len(entry.body) > JOURNALED_BODIES_BYTES_MAX:
                        entry.body = None
                    self.journaled_body_bytes += len(entry.body or b"")
            if order:
                self._number_passed(taken, order, start)
            pending.took_cold(lane, before)
        if self.selective_waiters and self.index.overflowed:
            self.selective_recheck = True  # messages left out of the index came in

    def _bodies_bounded(self, load: Loader) -> Loader:
        """`load` for one take of a refill, REFILL_MIN records at a time, each journaled
        body past JOURNALED_BODIES_BYTES_MAX (with those kept before it in this take)
        left on disk as soon as it is read (`_refill` counts the ones kept). Why: a take
        reads up to WINDOW_ENTRIES_MAX records in one call, and with 1 MB messages the
        server's peak RSS reached 1.6 GB (the records read, their bodies, the journal's
        pages) to keep 64 MiB of them."""
        kept_bytes = 0

        def bounded(seqs: list[int]) -> list:
            nonlocal kept_bytes
            loaded = []
            for start in range(0, len(seqs), REFILL_MIN):
                for entry in load(seqs[start : start + REFILL_MIN]):
                    body = entry.body
                    if body is not None and entry.journaled:
                        room = JOURNALED_BODIES_BYTES_MAX - self.journaled_body_bytes - kept_bytes
                        if len(body) > room:
                            entry.body = None
                        else:
                            kept_bytes += len(body)
                    loaded.append(entry)
            return loaded

        return bounded

    def _number_passed(self, taken: list[Entry], order: list[int], start: int) -> None:
        """A refill passed the places of messages a selective get had taken from the
        cold backlog (`order`: every seq it covered, those included). Each still out
        (awaiting its confirm, or lent) is numbered at its place among those read back,
        which are numbered again after `start`: if it comes back (`put_back`,
        `detach`) it goes after the older ones now in memory, not to the front."""
        read_back = {entry.seq: entry for entry in taken}
        arrival = start
        for seq in order:
            entry = read_back.get(seq)
            if entry is None:
                entry = self.unconfirmed.get(seq)
            if entry is None:
                entry = self.lent.get(seq)
            if entry is not None:
                arrival += 1
                entry.arrival = arrival
        self.arrivals = arrival

    def take(self, select: Selection | None = None) -> Entry | None:
        """The next message to hand out (highest priority, then first arrived), or
        with `select` the first such message it matches; None if there is none."""
        if select is not None:
            return self._take_selected(select)
        pending = self.pending
        while (lane := pending.top()) is not None:
            if lane.cold.count and len(lane.window) < REFILL_BELOW:
                self._refill(lane)
            if lane.window:
                entry = pending.popleft(lane)
                break
            pending.settle(lane)
        else:
            return None
        self._taken(entry, True)
        return entry

    def _taken(self, entry: Entry, from_window: bool) -> None:
        """An entry left `pending`: its index entry and what it was counted as go (its
        place in the index's order stays with it, for a put-back)."""
        order = self.index.remove(entry.seq)
        if order:
            entry.select_order = order
        if entry.journaled:
            if from_window:
                self.journaled_body_bytes -= len(entry.body or b"")
        else:
            self.memory_count -= 1
            size = len(entry.body or b"")
            self.memory_bytes -= size
            assert self.memory_count >= 0 and self.memory_bytes >= 0, "memory count below 0"
            if entry.account is not None:
                entry.account.held_bytes -= size
                entry.account = None  # charged once: a redelivery is the queue's, not the sender's

    def find(self, select: Selection) -> tuple[int, Lane[Entry]] | None:
        """The seq (and lane) of the first pending message `select` matches (highest
        priority, then first arrived): through the index for an eq key on correlation
        id or class, else by a scan of at most SELECT_SCAN_MESSAGES_MAX messages
        (each counted in `SelectIndex.scanned`)."""
        index = self.index
        if not index.enabled:
            self.build_index()
        attributes = index.attributes
        correlation_id = select.equal_value("correlation_id")
        # b"" (the messages without one) is not in the index: scanned like other keys.
        # Why: the lookup found none, so such a get waited out its timeout beside them.
        if correlation_id:
            best: tuple[int, int] | None = None
            looked = 0
            for seq in islice(index.with_correlation_id(correlation_id), SELECT_SCAN_MESSAGES_MAX):  # type: ignore[arg-type]
                looked += 1
                held = attributes[seq]
                if select.matches(held) and (best is None or held.priority > best[0]):
                    best = (held.priority, seq)
            index.scanned += looked
            index.cut = best is None and looked == SELECT_SCAN_MESSAGES_MAX
            return None if best is None else (best[1], self.pending.lane(best[0]))
        msg_class = select.equal_value("msg_class")
        budget = SELECT_SCAN_MESSAGES_MAX
        for lane in self.pending.lanes():
            if not select.priority_allows(lane.priority):
                continue
            if msg_class is not None:
                seqs: Iterable[int] = index.of_class(lane.priority, msg_class)  # type: ignore[arg-type]
            else:
                seqs = chain(map(_seq_of, lane.window), lane.cold)  # lazily (`Backlog`)
            for seq in islice(seqs, budget):
                budget -= 1
                found = attributes.get(seq)
                if found is not None and select.matches(found):
                    index.scanned += SELECT_SCAN_MESSAGES_MAX - budget
                    return seq, lane
        index.scanned += SELECT_SCAN_MESSAGES_MAX - budget
        index.cut = budget == 0
        return None

    def _take_selected(self, select: Selection) -> Entry | None:
        while (found := self.find(select)) is not None:
            seq, lane = found
            for entry in lane.window:
                if entry.seq == seq:
                    self.pending.remove(lane, entry)
                    self._taken(entry, True)
                    return entry
            held = self.pending.discard_cold(lane, seq)
            if held is None and self.load_cold is not None:
                loaded = self.load_cold([seq])
                held = loaded[0] if loaded else None
            if held is not None:
                self._taken(held, False)
                return held
            self.index.remove(seq)  # vanished from the journal (reported): look again
        return None

    def build_index(self) -> None:
        """Start the selection index (the queue's first selective get): every window
        and held entry, and the records of cold messages, read once a chunk at a time."""
        index = self.index
        index.enabled = True
        for lane in self.pending.lanes():
            for entry in lane.window:
                index.add(entry, lane.priority)
            unknown = []
            for seq in lane.cold:
                held = lane.cold.held_entry(seq)
                if held is not None:
                    index.add(held, lane.priority)
                else:
                    unknown.append(seq)
            if self.load_cold is None:
                continue
            for start in range(0, len(unknown), _RECOVERED_CHUNK):
                for entry in self.load_cold(unknown[start : start + _RECOVERED_CHUNK]):
                    index.add(entry, lane.priority)

    def drop_pending(self, entry: Entry) -> None:
        """Remove a window entry as if it was never queued, with all it was counted as
        (the broken build that forgets unconfirmed messages, mrs.testing.broken_builds):
        the queue's counters change only here, in their owner."""
        lane = self.pending.lane(lane_of(entry))
        self.pending.remove(lane, entry)
        self._taken(entry, True)

    def park(self, waiter: GetWaiter) -> None:
        """Park a get that found nothing it may take (at the unconfirmed cap it did
        not look: `GetWaiter.looked`)."""
        self.waiters.append(waiter)
        if self.shared:
            self._count_parked(waiter.session_id, 1)
        if waiter.select is not None:
            self.selective_waiters += 1
            waiter.looked = self.can_deliver() and not self.index.cut  # its look, just now

    def parked(self, session_id: int) -> int:
        """The gets of session `session_id` parked here (what parked_gets_max bounds)."""
        if self.shared:
            return self.parked_by.get(session_id, 0)
        return len(self.waiters)  # one session reads a queue that is not shared

    def _count_parked(self, session_id: int, delta: int) -> None:
        count = self.parked_by.get(session_id, 0) + delta
        if count > 0:
            self.parked_by[session_id] = count
        else:
            self.parked_by.pop(session_id, None)

    def unpark(self, waiter: GetWaiter) -> bool:
        """Take a parked get off the queue; False if it is no longer parked (a message
        took it). Asked first, not caught: deque.remove's ValueError formats the
        waiter's repr, and at 1,000 gets timing out a second that was the server's
        main cost (benchmarks/README.md)."""
        if waiter not in self.waiters:  # identity: GetWaiter compares by id
            return False
        self.waiters.remove(waiter)
        if self.shared:
            self._count_parked(waiter.session_id, -1)
        if waiter.select is not None:
            self.selective_waiters -= 1
        return True

    def lend(self, entry: Entry) -> None:
        """Remember an entry that needs no confirm as lent to the attached client
        (`lent`): read ahead, or handed to a get (mrs.group.handover.send_when_marked)."""
        lent = self.lent
        if entry.seq in lent:
            return
        lent[entry.seq] = entry
        self.lent_bytes += len(entry.body or b"")
        while len(lent) > LENT_REMEMBERED_MAX or self.lent_bytes > LENT_BYTES_MAX:
            oldest = lent.popitem(last=False)[1]  # lent long ago: the client took it
            self.lent_bytes -= len(oldest.body or b"")

    def restore_unconfirmed(self, entries: list[Entry]) -> None:
        """Entries whose confirms' commit failed (in the order they were confirmed)
        await their confirm again at their places in delivery order, which is the
        order an in-order queue checks. Each was the oldest unconfirmed when it was
        confirmed, so it goes before every entry never confirmed and after those
        whose confirms, in flight with it, failed before (`confirms_failed`). Before,
        the unconfirmed were sorted by seq: after a higher priority was delivered
        first, the application's retry of its failed confirm answered BADSEQ."""
        unconfirmed = self.unconfirmed
        failed = self.confirms_failed
        failed.intersection_update(unconfirmed)  # confirmed since, or detached
        ordered = list(unconfirmed.items())
        front = 0
        while front < len(ordered) and ordered[front][0] in failed:
            front += 1
        ordered[front:front] = [(entry.seq, entry) for entry in entries]
        unconfirmed.clear()
        unconfirmed.update(ordered)
        failed.update(entry.seq for entry in entries)

    def unlend(self, seq: int) -> None:
        """Forget a read-ahead entry whose batch was never sent (its marks' commit failed)."""
        entry = self.lent.pop(seq, None)
        if entry is not None:
            self.lent_bytes -= len(entry.body or b"")

    def give_back(self, seqs: list[int]) -> int:
        """Read-ahead entries the client never handed to a get: each seq lent goes
        back to its place in arrival order, waiting in memory again; a seq not lent
        (or already given back) is ignored. Returns how many came back."""
        self.gave_back = True
        returned = 0
        for seq in seqs:
            entry = self.lent.pop(seq, None)
            if entry is None:
                continue
            self.lent_bytes -= len(entry.body or b"")
            entry.times_delivered -= 1
            self.put_back(entry)  # counted as waiting again (memory_count, bytes)
            returned += 1
        return returned

    def detach(self) -> list[Entry]:
        """The attached session left: unconfirmed entries return to their places in
        their lanes (`_arrival_place`: before what arrived after them, after what arrived
        before them and still waits) to be delivered again, marked POSSDUPL. Before,
        each went to the very front of its lane: a message a selective get had taken
        came again ahead of the older ones it passed over, an order no restart gives
        (recovery puts every lane back in seq order). One taken from the cold backlog
        goes back there, at its place among the older and later ones still on disk
        (before, to the front of the window: ahead of older ones on disk)."""
        returned = sorted(self.unconfirmed.values(), key=lambda entry: entry.seq)
        self.unconfirmed.clear()
        self.confirms_failed.clear()
        # One a selective get took from the cold backlog waits there again at its place
        # (`restore_cold`). The others: each one's place among the messages still
        # waiting first, then all inserted: those with the same place keep seq order
        # among themselves, as a restart's, and take their arrival numbers in that
        # order (a later put-back agrees).
        placed: list[tuple[int, int, int]] = []
        for order, entry in enumerate(returned):
            priority = lane_of(entry)
            if self.pending.restore_cold(entry, priority):
                self.index.add(entry, priority)
                self._restored_cold(entry)
            else:
                placed.append((priority, self._arrival_place(entry, priority), order))
        placed.sort()
        _renumber_by_seq(returned, placed)
        inserted: dict[int, int] = {}
        for priority, place, order in placed:
            entry = returned[order]
            before = inserted.get(priority, 0)
            inserted[priority] = before + 1
            self.index.add(entry, priority)
            self.pending.insert(entry, priority, place + before)
            if entry.journaled:
                self._count_journaled_body(entry)
            else:
                self.memory_count += 1
                self.memory_bytes += len(entry.body or b"")
        self.attached_session = None
        if self.gave_back:  # a clean close: the client gave back all it held
            self.lent.clear()
            self.lent_bytes = 0
            self.gave_back = False
        # Else the connection was lost: the client keeps what it read ahead for its
        # gets after a reconnect, and gives back at its close what none took. Before,
        # `lent` was forgotten here and that GiveBack ignored: every read-ahead
        # message held across a reconnect and not got was lost at the close.
        for waiter in self.waiters:
            waiter.cancel_timer()
        self.waiters.clear()
        self.parked_by.clear()
        self.selective_waiters = 0
        return returned


def _renumber_by_seq(returned: list[Entry], placed: list[tuple[int, int, int]]) -> None:
    """Within each run of `placed` (priority, place, index into `returned` in seq
    order) going to one place, hand the run's arrival numbers out in seq order."""
    start = 0
    while start < len(placed):
        end = start + 1
        while end < len(placed) and placed[end][:2] == placed[start][:2]:
            end += 1
        run = [returned[order] for _, _, order in placed[start:end]]
        for entry, arrival in zip(run, sorted(entry.arrival for entry in run), strict=True):
            entry.arrival = arrival
        start = end
