"""Target queues in memory: what waits to be got, what waits to be confirmed, who waits.

A queue knows nothing of sockets or journals. It holds `Entry`s (a message plus the
callbacks its sender waits on) in arrival order, the delivered but unconfirmed ones
in delivery order, and the gets parked until something arrives."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from mrs.config.bus import QueueConfig
from mrs.group.backlog import REFILL_BELOW, WINDOW_ENTRIES_MAX, ColdBacklog, Loader
from mrs.limits import JOURNALED_BODIES_BYTES_MAX, LENT_BYTES_MAX, LENT_REMEMBERED_MAX
from mrs.model import DEAD_LETTER_QUEUE, Address, ConfirmStyle, DeliveryMode, InterestPoint

Notify = Callable[["Entry"], None]
_BODIES_BYTES_MAX: Final = JOURNALED_BODIES_BYTES_MAX  # per message: C statics
_LENT_MAX: Final = LENT_REMEMBERED_MAX
_LENT_BYTES_MAX: Final = LENT_BYTES_MAX
_ACK_POINT: Final = InterestPoint.ACK


@dataclass(slots=True, eq=False)
class ByteAccount:
    """Bytes of message bodies one connection has waiting in memory queues (what the
    guard connection_bytes_max bounds); queues charge and release it."""

    held_bytes: int = 0


@dataclass(eq=False)
class Entry:
    """One message in a target queue."""

    seq: int
    body: bytes | None
    """None for a journaled entry whose body was left on disk (read at delivery)."""
    source: Address
    target: Address
    delivery: DeliveryMode
    uma: int = 0
    msg_class: int = 0
    msg_type: int = 0
    priority: int = 0
    correlation_id: bytes = b""
    put_time_ns: int = 0
    dead_letter_header: dict | None = None
    headers: dict | None = None
    origin_group: int | None = None
    """For a message that came over a link: the group to tell about its confirm."""
    response_queue: Address | None = None
    """AK_CONF put in this group: where its MRS_ACK goes (journaled, for a restart)."""
    delivery_status: int | None = None
    """Forced delivery status (e.g. MSGUNDEL for a returned message); None = derive."""
    journaled: bool = False
    """True when the entry is backed by a DQF record (recoverable)."""
    trusted: bool = False
    """Every field came from a Put this server checked, from the server itself (an
    MRS_ACK) or from a DQF record `fits_a_delivery` passed: its Delivery is built
    unchecked. False for other records read back, what came over a link (both checked
    by `delivery_event`), and a put that passed its own MQDLH or a dead letter's
    context (fields the server took from headers)."""
    times_delivered: int = 0
    arrival: int = 0
    """Place in its queue's arrival order: an entry taken but not delivered goes back
    to this place, so a failed delivery never reorders the queue."""
    on_dequeue: Notify | None = None
    """WF/AK_DEQ: the sender waits for the get."""
    on_confirm: Notify | None = None
    """WF/AK_ACK and WF/AK_CONF: the sender waits for the confirm."""
    account: ByteAccount | None = None
    """The putting connection's account, charged while the body waits in memory."""

    def __init__(
        self,
        seq: int,
        body: bytes | None,
        source: Address,
        target: Address,
        delivery: DeliveryMode,
        uma: int = 0,
        msg_class: int = 0,
        msg_type: int = 0,
        priority: int = 0,
        correlation_id: bytes = b"",
        put_time_ns: int = 0,
        dead_letter_header: dict | None = None,
        headers: dict | None = None,
        origin_group: int | None = None,
        response_queue: Address | None = None,
        delivery_status: int | None = None,
        journaled: bool = False,
        trusted: bool = False,
        times_delivered: int = 0,
        arrival: int = 0,
        on_dequeue: Notify | None = None,
        on_confirm: Notify | None = None,
        account: ByteAccount | None = None,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.seq = seq
        self.body = body
        self.source = source
        self.target = target
        self.delivery = delivery
        self.uma = uma
        self.msg_class = msg_class
        self.msg_type = msg_type
        self.priority = priority
        self.correlation_id = correlation_id
        self.put_time_ns = put_time_ns
        self.dead_letter_header = dead_letter_header
        self.headers = headers
        self.origin_group = origin_group
        self.response_queue = response_queue
        self.delivery_status = delivery_status
        self.journaled = journaled
        self.trusted = trusted
        self.times_delivered = times_delivered
        self.arrival = arrival
        self.on_dequeue = on_dequeue
        self.on_confirm = on_confirm
        self.account = account

    @property
    def needs_confirm(self) -> bool:
        return self.journaled or self.delivery.interest_point is _ACK_POINT


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

    def __init__(
        self,
        deliver: Callable[..., bool | None],
        session_id: int,
        request_id: int = 0,
        cancel_timer: Callable[[], None] = _no_timer,
        reserved: bool = False,
        timed_out: Callable[[], None] | None = None,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.deliver = deliver
        self.session_id = session_id
        self.request_id = request_id
        self.cancel_timer = cancel_timer
        self.reserved = reserved
        self.timed_out = timed_out


def _always_ready(entry: Entry) -> bool:
    return True


@dataclass(eq=False)
class TargetQueue:
    config: QueueConfig
    address: Address
    pending: deque[Entry] = field(default_factory=deque)
    unconfirmed: dict[int, Entry] = field(default_factory=dict)
    waiters: deque[GetWaiter] = field(default_factory=deque)
    attached_session: int | None = None
    memory_count: int = 0
    """Nonrecoverable messages waiting in `pending` (what messages_max bounds)."""
    memory_bytes: int = 0
    """Their bodies' bytes (what the guard queue_bytes_max bounds)."""
    journaled_body_bytes: int = 0
    """Bodies of journaled entries in `pending` kept in memory (a cache of the DQF)."""
    arrivals: int = 0
    cold: ColdBacklog[Entry] = field(default_factory=ColdBacklog)
    """Journaled messages behind the in-memory window, as seqs (mrs.group.backlog)."""
    load_cold: Loader | None = None
    """Reads cold messages back from the DQF; None keeps every entry in memory."""
    storing: int = 0
    """DQF stores for this queue submitted and not yet committed (mrs.group.dqf)."""
    reserved: int = 0
    """Of those, the ones that took a parked get with them (`reserve_waiter`)."""
    lent: OrderedDict[int, Entry] = field(default_factory=OrderedDict)
    """Read-ahead entries lent beyond a GetBatch's count, by seq, oldest first (given
    back by `give_back`; bounded by LENT_*; forgotten at detach). An OrderedDict: a
    dict's oldest key after many front pops scans the holes (1.9 against 0.4 µs)."""
    lent_bytes: int = 0
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
        """Messages waiting to be got: the window in memory and the cold backlog."""
        return len(self.pending) + self.cold.count

    @property
    def drained(self) -> bool:
        """Gets are parked, no message waits: a confirm answered later holds none up."""
        return bool(self.waiters) and not self.pending and not self.cold.count

    def can_deliver(self) -> bool:
        """False while unconfirmed_max (with reserved deliveries) await a confirm."""
        return len(self.unconfirmed) + self.reserved < self.unconfirmed_max

    def reserve_waiter(self) -> GetWaiter | None:
        """The parked get an arriving journaled message may take with it, or None: its
        delivery mark then joins the message's own transaction (one commit, not two).
        Only when arrival order allows: nothing waits in memory or cold, and every
        store under way here reserved a get too (delivered in commit order)."""
        if self.storing != self.reserved or self.pending or self.cold.count or not self.waiters:
            return None
        if not self.can_deliver():
            return None
        waiter = self.waiters.popleft()
        waiter.reserved = True
        self.reserved += 1
        return waiter

    def offer(self, entry: Entry) -> None:
        """Add an arriving entry: hand it to a parked get if one may have it now (nothing
        older waits and the unconfirmed cap allows), or queue it behind the others."""
        if self.waiters and not self.pending and self.can_deliver():
            self._deliver_to_waiter(entry)
        else:
            self.put_back(entry, front=False)

    def _deliver_to_waiter(self, entry: Entry) -> None:
        waiter = self.waiters.popleft()
        if waiter.deliver(entry) is False:
            self.waiters.appendleft(waiter)  # not delivered (quarantined): still waiting
        else:
            waiter.cancel_timer()

    def serve_waiters(self, ready: Callable[[Entry], bool] = _always_ready) -> None:
        """Hand waiting entries to parked gets, oldest first, while the unconfirmed cap
        allows: for whenever a delivery becomes possible again (a confirm; a delivery
        that failed and put its entry back). `ready(entry)` False skips an entry that
        cannot be delivered (e.g. its body is unreadable)."""
        while self.waiters and self.can_deliver():
            entry = self.take()
            if entry is None:
                return
            if not ready(entry):
                continue
            self._deliver_to_waiter(entry)

    def put_back(self, entry: Entry, front: bool = True) -> None:
        """Queue an entry without offering it to waiters. front: it was taken before
        and goes back to its place in arrival order (before everything that came later)."""
        if front:
            index = next(
                (i for i, waiting in enumerate(self.pending) if waiting.arrival > entry.arrival),
                len(self.pending),
            )
            self.pending.insert(index, entry)
        elif self._goes_cold(entry):
            self.cold.append(entry, entry.seq, self._can_go_cold(entry))
            entry.body = None if entry.journaled else entry.body  # on disk: read back later
            if entry.journaled:
                return
        else:
            self.arrivals += 1
            entry.arrival = self.arrivals
            self.pending.append(entry)
            if (
                entry.journaled
                and entry.body is not None
                and self.journaled_body_bytes + len(entry.body) > _BODIES_BYTES_MAX
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

    def _goes_cold(self, entry: Entry) -> bool:
        """Behind cold ones (arrival order), or journaled beyond the window."""
        if self.load_cold is None:
            return False
        if self.cold.count:
            return True
        return len(self.pending) >= WINDOW_ENTRIES_MAX and self._can_go_cold(entry)

    @staticmethod
    def _can_go_cold(entry: Entry) -> bool:  # ColdBacklog.can_go_cold, on native fields
        return entry.journaled and entry.on_confirm is None and entry.on_dequeue is None

    def _refill(self) -> None:
        """Read the next cold messages back into the window, in arrival order."""
        load = self.load_cold
        assert load is not None  # nothing goes cold without a loader (_goes_cold)
        while self.cold.count and len(self.pending) < WINDOW_ENTRIES_MAX:
            for entry in self.cold.take(WINDOW_ENTRIES_MAX - len(self.pending), load):
                self.arrivals += 1
                entry.arrival = self.arrivals
                self.pending.append(entry)
                if entry.journaled and entry.body is not None:
                    if self.journaled_body_bytes + len(entry.body) > _BODIES_BYTES_MAX:
                        entry.body = None
                    self.journaled_body_bytes += len(entry.body or b"")

    def take(self) -> Entry | None:
        if self.cold.count and len(self.pending) < REFILL_BELOW:
            self._refill()
        if not self.pending:
            return None
        entry = self.pending.popleft()
        if entry.journaled:
            self.journaled_body_bytes -= len(entry.body or b"")
        else:
            self.memory_count -= 1
            size = len(entry.body or b"")
            self.memory_bytes -= size
            if entry.account is not None:
                entry.account.held_bytes -= size
                entry.account = None  # charged once: a redelivery is the queue's, not the sender's
        return entry

    def park(self, waiter: GetWaiter) -> None:
        self.waiters.append(waiter)

    def unpark(self, waiter: GetWaiter) -> bool:
        """Take a parked get off the queue; False if it is no longer parked (a message
        took it). Asked first, not caught: deque.remove's ValueError formats the
        waiter's repr, and at 1,000 gets timing out a second that was the server's
        main cost (benchmarks/README.md)."""
        if waiter not in self.waiters:  # identity: GetWaiter compares by id
            return False
        self.waiters.remove(waiter)
        return True

    def lend(self, entry: Entry) -> None:
        """Remember a read-ahead entry as lent to the attached client (`lent`)."""
        lent = self.lent
        lent[entry.seq] = entry
        self.lent_bytes += len(entry.body or b"")
        while len(lent) > _LENT_MAX or self.lent_bytes > _LENT_BYTES_MAX:
            oldest = lent.popitem(last=False)[1]  # lent long ago: the client took it
            self.lent_bytes -= len(oldest.body or b"")

    def give_back(self, seqs: list[int]) -> int:
        """Read-ahead entries the client never handed to a get: each seq lent goes
        back to its place in arrival order, waiting in memory again; a seq not lent
        (or already given back) is ignored. Returns how many came back."""
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
        """The attached session left: unconfirmed entries return to the front of the
        queue (oldest first) to be delivered again, marked POSSDUPL."""
        returned = sorted(self.unconfirmed.values(), key=lambda entry: entry.seq)
        self.unconfirmed.clear()
        self.pending.extendleft(reversed(returned))
        for entry in returned:
            if entry.journaled:
                self.journaled_body_bytes += len(entry.body or b"")
            else:
                self.memory_count += 1
                self.memory_bytes += len(entry.body or b"")
        self.attached_session = None
        self.lent.clear()  # what the client still held is its own now (not recoverable)
        self.lent_bytes = 0
        for waiter in self.waiters:
            waiter.cancel_timer()
        self.waiters.clear()
        return returned
