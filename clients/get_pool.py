"""Gets waiting at the same time share GetBatch requests: a prefetch the caller does
not have to ask for.

Why: a consumer with many tasks each looping get -> confirm sent one Get per message,
and the server parked, answered and marked each on its own. Here every `Client.get`
that has to wait joins one pool of callers; the send loop, when it next writes, asks
for as many messages as there are callers not yet covered by a GetBatch in flight
(`GetPool.ask`), in GetBatches of up to GET_POOL_BATCH_MAX. The server answers each
with the messages ready now (one commit marks them all), or with the first to
arrive; they go to the waiting callers oldest first. A batch answered with fewer
messages than it asked for leaves callers uncovered, and the next write asks again
at once, so several batches may be in flight: no caller waits for another round to
finish (a single round in flight starved the consumer, benchmarks/README.md).

What each caller still sees is a Get's behaviour:
- its own timeout: a batch waits at most as long as the earliest uncovered caller
  still may; when the server answers TIMEOUT, the callers whose time is up raise
  MrsTimeout and the others are asked for again;
- cancelling: the caller leaves the pool; when no caller is left, the batches in
  flight are withdrawn (CancelGet). A message already on its way, or one more than
  the callers still waiting, is held and handed to the next get, as a cancelled
  Get's is (bounded by HELD_MESSAGES_MAX through `Requests.reserve_get`);
- a lost connection: every waiting caller raises ConnectionLost;
- a queue the server serves one get at a time (implicit confirm, the dead-letter
  queue under leases) refuses GetBatch with BADPARAM: the pool turns itself off and
  its callers take the single-Get path.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

import trio

from clients.errors import MrsError, ReplyTimeout, error_for
from clients.waiting import Pending
from mrs import protocol as wire
from mrs.limits import (
    GET_BATCH_ITEMS_MAX,
    GET_POOL_BATCH_MAX,
    HELD_MESSAGES_MAX,
    LENT_REMEMBERED_MAX,
    READ_AHEAD_MAX,
    REPLY_GRACE_S,
)
from mrs.model import Message, Status
from mrs.protocol.base import build_unchecked
from mrs.protocol.event_types import FAILURE, GET_BATCH

if TYPE_CHECKING:
    from clients.deadlines import ReplyDeadlines
    from clients.errors import QuotaExceeded
    from clients.link import _Link

log = logging.getLogger("clients")

_RETRY_SINGLE: Final = object()
"""A caller's answer when the server refuses batch gets on this queue: use a Get."""

_TIMEOUT_MS_MAX: Final = (1 << 31) - 1


def _batch_wait_ms(left_s: float) -> int:
    """A pooled batch's wait on the wire: `left_s` in whole milliseconds, 1 ms to
    _TIMEOUT_MS_MAX. Bounded in seconds before the product: a get(timeout=1e308)
    made `left_s * 1000` infinite, and `math.ceil(inf)` raised OverflowError in the
    send loop, which ended the connection ("client closed") for every call on it."""
    return max(1, math.ceil(min(left_s, _TIMEOUT_MS_MAX / 1000) * 1000))


# The pool's clock is the reply deadlines' (`ReplyDeadlines.now_s`), trio's time read cheaply.

CALLERS_SLACK: Final = 64
"""Callers that left may stay in the deque until this many more than twice those
waiting: then it is rebuilt (they are skipped, not served, in the meantime)."""


class _Owner(Protocol):
    """What the pool uses of the client's request table (clients.pending.Requests,
    which imports this module and holds the pool)."""

    link: _Link | None
    held: deque[Message]
    pending: dict[int, Pending]
    deadlines: ReplyDeadlines

    def next_id(self) -> int: ...
    def get_room(self) -> int: ...
    def no_get_room(self, room: int) -> QuotaExceeded: ...
    def reserve_get(self, request_id: int, count_max: int) -> int: ...
    def release_get(self, request_id: int) -> None: ...
    def message(self, reply: wire.Delivery) -> Message: ...


class _Caller(Pending):
    """One `get` waiting in the pool; `deadline_s` is when its own timeout ends (trio
    time, inf for none). Leaving the pool (cancelled, reply deadline passed) tells it."""

    def __init__(self, pool: GetPool) -> None:
        super().__init__("get")
        self.pool = pool
        self.deadline_s = math.inf
        self.asked = False
        """A batch was asked for it before: the server has parked it (see `ask`)."""

    def expire(self) -> None:
        self._leave()
        Pending.expire(self)

    def __call__(self, raise_cancel: object) -> trio.lowlevel.Abort:
        self._leave()
        return Pending.__call__(self, raise_cancel)

    def _leave(self) -> None:
        """Stop waiting without an answer (reply deadline, cancelled): tell the pool."""
        if not self.done:
            self.pool.left()


class _Batch:
    """A GetBatch in flight: what it may still bring, the callers it was asked for
    (those its refusal concerns), and the most messages its answer may hold (its
    count and its read-ahead: `messages_max`, kept when it is withdrawn)."""

    def __init__(self, count: int, callers: list[_Caller], messages_max: int) -> None:
        self.count = count
        self.callers = callers
        self.messages_max = messages_max


class GetPool:
    """The callers of one client waiting for a message, and the GetBatch requests
    asked for them. `live` callers wait; `asked` messages may still come."""

    def __init__(self, client: _Owner) -> None:
        self._client = client
        self._callers: deque[_Caller] = deque()
        self.live = 0
        """Callers waiting (cancelled or expired ones leave at once)."""
        self.asked = 0
        """Messages the batches in flight may still bring."""
        self._batches: dict[int, _Batch] = {}
        """Request id of a GetBatch in flight -> what it asked for."""
        self.refused = False
        """The server serves this queue one Get at a time: the pool is off."""
        self._reading_ahead: int | None = None
        """Request id of the batch in flight that may bring read-ahead messages."""
        self.closing = False
        """The client is closing: no more read-ahead (`settle`)."""
        self.read_ahead_max = READ_AHEAD_MAX
        """Messages a batch may take beyond its callers' (`connect(read_ahead_max=)`,
        0..READ_AHEAD_MAX): 0 switches read-ahead off, so a message of higher priority
        that arrives later is got before the ones behind it."""
        self._settled: trio.Event | None = None
        """Set when the last batch in flight is answered (`settle` waits for it)."""
        self._withdrawn_answered = trio.lowlevel.ParkingLot()
        """Waiting in `withdrawn_answered` for the answers of withdrawn batches."""
        self.withdrawn_count = 0
        """Batches withdrawn (their callers gave up) not answered yet: each may still
        bring messages, which will be held. A get_many or a poll sent before they come
        was answered without them (none waiting, or EXCMAXUNCONF), or waited its whole
        timeout while they sat in the client (`withdrawn_answered`)."""

    @property
    def withdrawn(self) -> bool:
        """Some withdrawn batch is not answered yet (`withdrawn_count`)."""
        return self.withdrawn_count > 0

    async def withdrawn_answered(self, wait_s: float | None) -> bool:
        """Wait (at most `wait_s`, None: no bound) until every withdrawn batch is
        answered, so what they brought is held before the caller asks the server;
        False if some are still unanswered then. One round trip: the server answers
        a withdrawn batch as it reads its CancelGet."""
        with trio.move_on_after(math.inf if wait_s is None else wait_s):
            while self.withdrawn:
                await self._withdrawn_answered.park()
        return not self.withdrawn

    async def get(self, timeout_s: float | None) -> Message | None:
        """The next message for this caller; None: use a single Get instead (the
        server refused batch gets on this queue). Raises as `Client.get` does."""
        client = self._client
        room = client.get_room() - (self.live - self.asked)  # uncovered callers need it too
        if room <= 0:
            raise client.no_get_room(room)
        deadlines = client.deadlines
        now_s = deadlines.now_s()
        caller = _Caller(self)
        if timeout_s is not None:
            caller.deadline_s = now_s + timeout_s
            deadlines.add(caller.deadline_s + REPLY_GRACE_S, client.next_id(), caller)
        self._callers.append(caller)
        self.live += 1
        if len(self._callers) > 2 * self.live + CALLERS_SLACK:
            self._compact()
        if self.live > self.asked and client.link is not None:
            client.link.wake()  # the send loop asks (`ask`) once this tick's gets joined
        await caller.waited()
        if caller.timed_out:
            raise ReplyTimeout(Status.TIMEOUT, "no answer from the server in time")
        result = caller.result
        if type(result) is Message:
            return result
        if result is _RETRY_SINGLE:
            return None
        assert isinstance(result, BaseException)  # an MrsError: what a Get would raise
        raise result

    def left(self) -> None:
        """A caller left (cancelled, or its reply deadline passed); with none left,
        the send loop withdraws the batches in flight."""
        self.live -= 1
        link = self._client.link
        if self.live == 0 and self.asked and link is not None:
            link.wake()

    # ------------------------------------------------------------- the send loop's part
    def ask(self, link: _Link) -> None:
        """Queue GetBatches for the callers no batch in flight covers, or withdraw the
        batches when no caller is left (called by the send loop before it writes)."""
        if self.live == 0 or self.closing:
            if self.asked:
                self._withdraw(link)
            return
        need = min(self.live - self.asked, GET_BATCH_ITEMS_MAX, self._client.get_room())
        if need <= 0 or self.refused:  # no room: answers on their way free it, then ask
            return
        uncovered: list[_Caller] = []
        for caller in reversed(self._callers):
            if not caller.done:
                uncovered.append(caller)
                if len(uncovered) == need:
                    break
        uncovered.reverse()
        # A caller asked for before and not served was parked on the server, and a
        # parked get waits at the cap; a new one is refused there (EXCMAXUNCONF).
        now_s = self._client.deadlines.now_s()
        waited = [caller for caller in uncovered if caller.asked]
        fresh = [caller for caller in uncovered if not caller.asked]
        groups = [
            (callers[first : first + GET_POOL_BATCH_MAX], wait_at_cap)
            for callers, wait_at_cap in ((waited, True), (fresh, False))
            for first in range(0, len(callers), GET_POOL_BATCH_MAX)
        ]
        for index, (callers, wait_at_cap) in enumerate(groups):
            last = index == len(groups) - 1
            self._send_batch(link, callers, wait_at_cap, now_s, read_ahead=last)

    def _read_ahead(self) -> int:
        """How many messages beyond its callers' the next batch may take (read-ahead):
        `read_ahead_max` when nothing is held and no read-ahead is on its way, else 0
        (and 0 once the pool is closing). Not counted against the gets' room
        (HELD_MESSAGES_MAX): a get finds these held and never waits for room, and a
        consumer with many lanes must never be refused because of them; what is held
        stays within HELD_MESSAGES_MAX + READ_AHEAD_MAX."""
        if self.closing or self._reading_ahead is not None or self._client.held:
            return 0
        return self.read_ahead_max

    def _send_batch(
        self,
        link: _Link,
        callers: list[_Caller],
        wait_at_cap: bool,
        now_s: float,
        read_ahead: bool = False,
    ) -> None:
        """One GetBatch for `callers`; it waits as long as the earliest of them may.
        read_ahead: it may also take messages no caller waits for yet (held for the
        next gets), those the server may lend (in memory, no confirm: MRS_ACKs)."""
        client = self._client
        count = len(callers)
        extra = self._read_ahead() if read_ahead else 0
        deadline_s = min(caller.deadline_s for caller in callers)
        timeout_ms = -1 if deadline_s == math.inf else _batch_wait_ms(deadline_s - now_s)
        request_id = client.next_id()
        request = build_unchecked(GET_BATCH, request_id, count, timeout_ms, wait_at_cap, extra)
        client.reserve_get(request_id, count)
        if extra:
            self._reading_ahead = request_id
        for caller in callers:
            caller.asked = True
        self._batches[request_id] = _Batch(count, callers, count + extra)
        self.asked += count
        client.pending[request_id] = Pending("get", self._answer_of(request_id))
        link.send(request)
        link.unsent.add(request_id)

    def _withdraw(self, link: _Link) -> None:
        """CancelGet every batch in flight; they no longer count as asked (a message
        one brings anyway is held, or given to a caller that came since)."""
        for request_id, batch in self._batches.items():
            if batch.count:
                batch.count = 0
                self.withdrawn_count += 1
                link.send(wire.CancelGet(request_id))
        self.asked = 0

    # ------------------------------------------------------------- answers
    def _answer_of(self, request_id: int) -> Callable[[object], None]:
        return lambda result: self._answered(request_id, result)

    def _answered(self, request_id: int, result: object) -> None:
        """A batch's answer: its messages to the callers, oldest first (any surplus is
        held), or its failure to the callers it concerns."""
        client = self._client
        batch = self._batches.pop(request_id, None)
        if batch is None:
            return
        if self._reading_ahead == request_id:
            self._reading_ahead = None
        if not self._batches and self._settled is not None:
            self._settled.set()
        if not batch.count:  # a withdrawn one: what it brought is held (below) before
            self.withdrawn_count -= 1  # the gets it wakes run
            if not self.withdrawn_count:
                self._withdrawn_answered.unpark_all()
        self.asked -= batch.count
        client.release_get(request_id)
        if isinstance(result, (wire.Delivery, wire.DeliveryBatch)):
            deliveries = result.deliveries if isinstance(result, wire.DeliveryBatch) else [result]
            messages = [client.message(delivery) for delivery in deliveries]
            if len(messages) > batch.messages_max:  # a server breaking the protocol
                messages = keep_asked(
                    client.link, messages, batch.messages_max, client.held, hold_surplus=False
                )
            for message in messages:  # any more than the callers waiting are held
                if not self._give(message):
                    client.held.append(message)
        elif type(result) is FAILURE:
            self._failed(result, batch.callers)
        elif isinstance(result, MrsError):  # the connection is lost
            self.lose(result)
        else:  # a server breaking the protocol: before, ignored and asked again, for ever
            error = error_for(
                Status.PROTOCOL_ERROR, f"the server answered GetBatch with {type(result).__name__}"
            )
            for caller in batch.callers:
                if not caller.done:
                    self._resolve(caller, error)
        link = client.link
        if self.live > self.asked and link is not None:
            link.wake()

    def serve_held(self) -> None:
        """Messages held (they came for a get its caller gave up) go to the callers
        already waiting, oldest first, before any later get takes them."""
        held = self._client.held
        while held and self._give(held[0]):
            held.popleft()

    def _give(self, message: Message) -> bool:
        """Answer the oldest waiting caller `message`; False if none waits."""
        callers = self._callers
        while callers:
            caller = callers.popleft()
            if not caller.done:
                self._resolve(caller, message)
                return True
        return False

    def _failed(self, failure: wire.Failure, callers: list[_Caller]) -> None:
        if failure.status == Status.TIMEOUT:
            # The batch waited as long as its earliest caller may: whoever's time is
            # up raises it; the others are asked for again.
            now_s = self._client.deadlines.now_s()
            for caller in self._callers:
                if not caller.done and caller.deadline_s <= now_s:
                    self._resolve(caller, error_for(failure.status, failure.message))
        elif failure.status == Status.BADPARAM:  # this queue takes single Gets only
            self.refused = True
            self._answer_all(_RETRY_SINGLE)
        else:  # e.g. EXCMAXUNCONF: what the Gets of its callers would have raised
            error = error_for(failure.status, failure.message)
            for caller in callers:
                if not caller.done:
                    self._resolve(caller, error)

    async def settle(self, link: _Link) -> None:
        """Closing: withdraw every batch in flight and wait for their answers, so that
        what they bring is held (and can be given back) before the client goes."""
        self.closing = True
        if not self._batches:
            return
        self._withdraw(link)
        self._settled = trio.Event()
        await self._settled.wait()

    def lose(self, error: MrsError) -> None:
        """The connection is lost: every waiting caller raises `error`, and the
        batches in flight are forgotten (their messages come back marked POSSDUPL)."""
        self._answer_all(error)
        self._batches.clear()
        self.asked = 0
        self.withdrawn_count = 0
        self._reading_ahead = None
        if self._settled is not None:
            self._settled.set()
        self._withdrawn_answered.unpark_all()

    def _answer_all(self, result: object) -> None:
        for caller in self._callers:
            if not caller.done:
                self._resolve(caller, result)
        self._callers.clear()

    def _resolve(self, caller: _Caller, result: object) -> None:
        self.live -= 1
        caller.answer(result)

    def _compact(self) -> None:
        """Drop callers that left: a caller waiting for ever at the head must not
        keep every caller that timed out behind it."""
        self._callers = deque([caller for caller in self._callers if not caller.done])


def keep_asked(
    link: _Link | None,
    messages: list[Message],
    messages_max: int,
    held: deque[Message],
    *,
    hold_surplus: bool,
) -> list[Message]:
    """What a client keeps of an answer that brought more than the `messages_max` its
    request asked for (a broken server): those first, then, while what is held stays
    within HELD_MESSAGES_MAX + READ_AHEAD_MAX, the surplus that needs a confirm (the
    group counts it delivered: dropped, it would come again marked POSSDUPL, unseen,
    and jam an in-order queue) and, with `hold_surplus` (a get_many: its documented
    "the rest are held for the next gets"), the rest of the surplus too. The surplus
    that needs no confirm and is not kept is given back at once (GiveBack: the group
    puts each at its place in the queue again, unmarked, for the next get). Why:
    before, every message of such an answer was held, as many as the frame could
    carry, beyond every bound the held messages keep (docs/client-library.md)."""
    kept = messages[:messages_max]
    room = HELD_MESSAGES_MAX + READ_AHEAD_MAX - len(held) - messages_max
    given_back: list[int] = []
    dropped = 0
    for message in messages[messages_max:]:
        if room > 0 and (hold_surplus or message.needs_confirm):
            kept.append(message)
            room -= 1
        elif not message.needs_confirm:
            given_back.append(message.seq)
        else:  # unconfirmed on the group: it comes again after a reconnect, POSSDUPL
            dropped += 1
    log.warning(
        "the server answered a get for %d with %d messages: %d held, %d given back, %d later",
        messages_max,
        len(messages),
        len(kept) - messages_max,
        len(given_back),
        dropped,
    )
    if given_back and link is not None:
        for first in range(0, len(given_back), LENT_REMEMBERED_MAX):
            link.send(wire.GiveBack(given_back[first : first + LENT_REMEMBERED_MAX]))
    return kept
