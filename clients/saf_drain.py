"""The client-side SAF journal path: journal a recoverable put while the server is
unreachable, and drain the journal in FIFO order, a window of records in flight, once it
is back (JOURNAL_ON -> LINK_UP). See docs/client-saf.md.

`SafDrain` is the part of `Client` (clients.connection) that does this. It is given
the journal, the request table (ids, the table its drained puts wait in, the link to
drain over and to drop when the server does not answer), the journal status it moves
to LINK_UP or JOURNAL_FAIL, and the client's `Attachment` (the source queue of a
journaled put).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import msgspec
import trio

from clients.dialing import Attachment
from clients.errors import ConnectionLost, MrsError, error_for
from clients.journal_status import JournalEvent as JournalEvent  # its old path
from clients.journal_status import JournalStatus
from clients.pending import Requests, _Pending
from clients.reconnect import PASSING_REFUSALS
from clients.requests import headers_problem, put_reply_wait_s, refuse_bad_pair
from clients.saf_journal import IDEMPOTENCY_HEADER as IDEMPOTENCY_HEADER  # its old path
from clients.saf_journal import ClientJournal, JournalFull, idempotency_key_for
from journals import Record
from mrs import protocol as wire
from mrs.limits import (
    CLIENT_DRAIN_BYTES_MAX,
    CLIENT_DRAIN_REFILL_MESSAGES,
    CLIENT_DRAIN_WINDOW_MESSAGES,
    CLIENT_SAF_DELETE_RETRY_S,
    CLIENT_SAF_REFUSALS_MAX,
    CLIENT_SAF_REFUSALS_SPAN_S,
    GROUP_ID_MAX,
    GROUP_ID_MIN,
    IDEMPOTENCY_KEY_BYTES_MAX,
    QUEUE_ID_MAX,
    QUEUE_ID_MIN,
)
from mrs.model import (
    POSSIBLE_DUPLICATE_HEADER,
    Address,
    DeliveryMode,
    Notification,
    Psb,
    Status,
    Uma,
    status_of,
)

if TYPE_CHECKING:
    from clients.link import _Link

log = logging.getLogger("clients")

CLIENT_SAF_SEQ_HEADER = "client_saf_seq"
"""Carried by a drained message: its seq in the sender's client journal (the seq the
journaled put's PSB gave), so the receiver can map it."""

_DRAIN_HEADERS_ROOM_BYTES = len(
    msgspec.msgpack.encode(
        {
            IDEMPOTENCY_HEADER: "k" * IDEMPOTENCY_KEY_BYTES_MAX,
            wire.REPLY_WHEN_STORED_HEADER: True,
            CLIENT_SAF_SEQ_HEADER: (1 << 64) - 1,
            wire.CLIENT_SAF_BACKLOG_HEADER: (1 << 64) - 1,
            POSSIBLE_DUPLICATE_HEADER: True,
        }
    )
)
"""Room a journaled put's headers leave for those the drain adds (`_send_drained`):
headers that fit alone but not with these were refused by the group at drain time,
after the put had been answered STORED."""


@dataclass(slots=True)
class _Refusals:
    """The record last refused with a status that passes by waiting: how often in a
    row and since when (`SafDrain._refused_again`)."""

    local_seq: int
    first_at: float
    count: int = 0


@dataclass(eq=False)
class _Window:
    """Drained records in flight: key -> body bytes, and their total."""

    keys: dict[bytes, int] = field(default_factory=dict)
    body_bytes: int = 0

    def add(self, key: bytes, size: int) -> None:
        self.keys[key] = size
        self.body_bytes += size

    def remove(self, key: bytes) -> None:
        self.body_bytes -= self.keys.pop(key, 0)


class _DrainedPut(_Pending):
    """A drained record's put awaiting its answer. Past its reply deadline
    (clients.requests.put_reply_wait_s, as for any put) the server is taken to have
    lost it: `unanswered` drops the connection, and the drain starts again from the
    oldest record on the next one (the server answers what it already stored as a
    duplicate). Without a deadline one put the server never answered kept the window
    from emptying, and the journal in JOURNAL_ON, for ever."""

    def __init__(
        self,
        kind: str,
        callback: Callable[[object], None] | None = None,
        unanswered: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(kind, callback)
        self.unanswered = unanswered

    def expire(self) -> None:
        if self.done:
            return
        _Pending.expire(self)
        if self.unanswered is not None:
            self.unanswered()


class SafDrain:
    """A client's journal-while-down and drain-when-back."""

    def __init__(
        self,
        journal: ClientJournal,
        requests: Requests,
        status: JournalStatus,
        attachment: Attachment,
        queue_text: str | None,
    ) -> None:
        self._journal = journal
        self._requests = requests
        self._status = status
        self._attachment = attachment
        self._queue_text = queue_text
        self._wake = trio.Event()
        """Set when the drain has work: a record journaled or answered, the journal changed."""
        self.window_messages = CLIENT_DRAIN_WINDOW_MESSAGES
        self.window_bytes = CLIENT_DRAIN_BYTES_MAX
        """The drain's window, halved each time the server refuses a drained put over
        its per-connection bound (EXCEEDQUOTA), so the next drain fits inside it."""
        self._tail: trio.Event | None = None
        """Not None while the drain has sent every journal record and waits only for
        their answers: a put made then waits for it (`_after_tail`) instead of going
        into the journal behind them (module doc: the drain must be able to end)."""
        self._retry_at: float | None = None
        """Not None while records left in the journal wait to be sent again (the
        server did not keep them, or their delete failed): when, on trio's clock. No
        newer record is sent meanwhile (`_drain`)."""
        self._holding_logged = False
        """A record the server did not keep was logged, and none was stored since."""
        self._redriven = trio.Event()
        """Set when refused records went back into the journal (`redriven`)."""
        self._refusals: _Refusals | None = None
        """The record last refused with a passing status (`_refused_again`)."""
        self._other_queues: set[tuple[int, int]] = set()
        """Queues (group, queue; 0, 0 when not known) records were journaled from
        other than this client's, each logged once (`_from_another_queue`)."""

    async def put_journaled(self, request: wire.Put) -> Psb:
        """Journal a checked put locally (JOURNAL_ON); the drain sends it later.
        What every group refuses is refused here, as the group would (its PSB says
        STORED, so a refusal at drain time would lose it): a mode/UMA pair
        (refuse_bad_pair), a client attached to no queue (NOTATTACHED), a target or
        resp_q that is no address (`address_problem`, NOSUCHQUEUE)."""
        target = request.target
        uma = request.uma
        refuse_bad_pair(request.delivery, uma)
        if self._queue_text is None:  # the group refuses a put from no queue, at drain time
            raise error_for(Status.NOTATTACHED, "attach to a queue first")
        for address in (target, request.resp_q):
            if address and (problem := address_problem(address)) is not None:
                raise error_for(Status.NOSUCHQUEUE, problem)
        too_big = headers_problem(request.headers, _DRAIN_HEADERS_ROOM_BYTES)
        if too_big is not None:  # else answered STORED now and refused at drain time
            raise error_for(Status.MSGTOOBIG, too_big)
        if self._tail is not None and (psb := await self._after_tail(request)) is not None:
            return psb
        if self._journal.closed:  # its `connect` block ended: no writer commits any more
            raise ConnectionLost(Status.LINK_DOWN, "client closed")
        target_group, target_queue = _numeric(str(target))
        queue = self._attachment.queue
        now_ns = time.time_ns()
        record = Record(
            seq=0,
            target_group=target_group,
            target_queue=target_queue,
            source_group=queue.group if queue else 0,
            source_queue=queue.queue if queue else 0,
            body=request.body,
            msg_class=request.msg_class,
            msg_type=request.msg_type,
            priority=request.priority,
            delivery=request.delivery,
            uma=uma,
            correlation_id=request.correlation_id,
            put_time_ns=now_ns,
            written_time_ns=now_ns,
            extra={
                "target": target,
                "resp_q": request.resp_q,
                "timeout_ms": request.timeout_ms,
                "headers": request.headers,
                "attach": self._queue_text or "",
            },
        )
        # A cancel point before the append: its commit is waited for shielded, so
        # without it a put loop in a cancelled scope (move_on_after, a nursery torn
        # down) journaled on for ever and never saw its cancellation. Given up here,
        # the put was not journaled.
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            local_seq = await self._journal.append(record)
        except JournalFull as full:
            if uma in (Uma.DISC, Uma.DISCL):
                if uma == Uma.DISCL:
                    log.warning("client SAF journal full; message to %s discarded", target)
                done = Status.DISC_SUCCESS if uma == Uma.DISC else Status.DISCL_SUCCESS
                return Psb(Status.JOURNAL_ON, Status.JOURNAL_FULL, 0, done)
            raise full
        self._wake.set()
        return Psb(Status.JOURNAL_ON, Status.STORED, local_seq, Status.NO_UMA)

    async def _after_tail(self, request: wire.Put) -> Psb | None:
        """A put made while the drain waits only for the answers of its last records:
        wait for them, then send it to the server (LINK_UP, or JOURNAL_FAIL: puts go
        straight on) and return its PSB; None if it is to be journaled after all (the
        connection was lost meanwhile, or the drain left records behind).

        Why: journaled behind the backlog, a put made as fast as the previous one was
        answered (a producer's loop) kept a record or two in the journal at every
        moment, so the journal never emptied: the client stayed JOURNAL_ON for as long
        as the application put, every put paid a local fsync and a drain, and
        `wait_journal_status(LINK_UP)` never returned. The wait is one round trip,
        bounded by the drained puts' own reply deadlines."""
        while self._tail is not None:
            await self._tail.wait()
        requests = self._requests
        if self._status.status == Status.JOURNAL_ON or requests.link is None:
            return None
        await requests.linked(Status.LINK_DOWN, "put")
        reply = await requests.request(request, put_reply_wait_s(request.timeout_ms / 1000), "put")
        return _psb(cast(wire.PutDone, reply))

    def _release_tail(self) -> None:
        """Puts waiting for the drain's last answers go on (`_after_tail`)."""
        tail, self._tail = self._tail, None
        if tail is not None:
            tail.set()

    async def drain(self, link: _Link) -> None:
        """Send every journal record, oldest first, CLIENT_DRAIN_WINDOW_MESSAGES in
        flight; a record is deleted when the server answers it stored. LINK_UP when
        nothing is left. Puts made once every record was sent wait for the last
        answers (`_after_tail`), released when this drain ends however it ends. Then,
        while the connection lasts, it waits for refused records sent again
        (`redriven`) and drains them the same way."""
        if self._queue_text is None and self._journal.count:
            self._leave_for_a_sender()
            return
        while True:
            try:
                await self._drain(link)
            finally:
                self._release_tail()
            if link.lost is not None or self._requests.link is not link:
                return
            await self._redriven.wait()  # cancelled with the connection's loops
            self._redriven = trio.Event()

    def _leave_for_a_sender(self) -> None:
        """Keep the records an earlier run journaled, unsent: this client is attached
        to no queue, and the group refuses a put from none. Why: each was sent,
        refused NOTATTACHED and moved aside to the refused records, so a program
        that opened its journal to look at it (`connect(address, None, ...)`) left
        its predecessor's backlog to be redriven by hand."""
        log.warning(
            "client SAF journal %s holds %d record(s) from an earlier run; this client is "
            "attached to no queue, so they are not sent: they drain when a client "
            "attached to a queue opens the journal",
            self._journal.path,
            self._journal.count,
        )

    def redriven(self) -> None:
        """Refused records went back into the journal (`Client.redrive_refused`): puts
        journal behind them (JOURNAL_ON) and the drain sends them on this connection
        (or the next one)."""
        if self._status.status != Status.JOURNAL_ON:
            self._status.set(Status.JOURNAL_ON)
        self._redriven.set()

    async def _drain(self, link: _Link) -> None:
        """`drain`'s loop: read a window's room of records, send them, wait for a change."""
        journal = self._journal
        journal.on_change = self._wake.set
        journal.on_corrupt = self._report_corrupt
        after_key: bytes | None = None
        window = _Window()
        self._retry_at = None
        while self._requests.link is link:
            self._wake = trio.Event()
            journal.on_change = self._wake.set
            room = self._room(window) if self._retry_at is None else 0
            items = journal.read_after(after_key, room) if room > 0 else []
            for key, record in items:
                after_key = key
                if (too_big := self._too_big(record)) is not None:
                    self._reject(key, record, Status.MSGTOOBIG, too_big)
                    continue
                window.add(key, len(record.body))
                self._send_drained(link, key, record, window)
            if items:
                await trio.lowlevel.checkpoint()
                continue
            if link.lost is not None:
                return
            if journal.failure is not None:
                self._status.fail(journal.failure)
                return
            if self._finished(window):
                return
            if room > 0 and window.keys and not journal.appending and self._tail is None:
                self._tail = trio.Event()  # every record sent: new puts wait, not journal
            if not window.keys and journal.idle and after_key is not None:
                # Records are left, none after `after_key`: the server did not keep them
                # (`_not_kept`), or their delete failed (a full disk). Sent again from
                # the oldest after a pause (the server answers a stored one with its
                # first copy's seq); puts journal meanwhile, sent after them. A wake
                # (a put journaled) does not cut the pause short: each one sent the
                # whole backlog again at once while a full DQF refused it.
                self._release_tail()
                if self._retry_at is None:
                    self._retry_at = trio.current_time() + CLIENT_SAF_DELETE_RETRY_S
                with trio.move_on_at(self._retry_at):
                    await self._wake.wait()
                if trio.current_time() >= self._retry_at:
                    after_key, self._retry_at = None, None
                continue
            await self._wake.wait()

    def _finished(self, window: _Window) -> bool:
        """Whether the drain is over: every record stored and deleted (LINK_UP), or
        only unreadable ones left (JOURNAL_FAIL: never LINK_UP over them)."""
        journal = self._journal
        if window.keys or not journal.idle or journal.count > len(journal.corrupt):
            return False
        if journal.count:
            self._status.fail(
                f"{journal.count} client SAF record(s) in {journal.path} cannot be "
                "read and were not sent; they stay in the journal"
            )
        else:
            self._status.set(Status.LINK_UP)
        return True

    def _room(self, window: _Window) -> int:
        """How many records to read into the window now: refilled in chunks (one read
        transaction for many records), well inside the server's per-connection quota."""
        room = self.window_messages - len(window.keys)
        refill = min(CLIENT_DRAIN_REFILL_MESSAGES, max(1, self.window_messages // 8))
        if window.keys and (room < refill or window.body_bytes >= self.window_bytes):
            return 0
        return room

    def _too_big(self, record: Record) -> str | None:
        """Why the server would refuse the record MSGTOOBIG (its body is over the limit
        the Welcome gave), said here without sending it; None if it would not.

        Why: a put journaled before the client ever reached its server could not be
        checked against that limit, and a frame over the server's limit makes it
        close the connection: the drain reconnected and sent the same record again for
        ever (hundreds of times a second), and nothing journaled after it arrived."""
        headers = record.extra.get("headers")
        if headers and (too_big := headers_problem(headers, _DRAIN_HEADERS_ROOM_BYTES)):
            return too_big  # journaled by a release that did not bound them: the same loop
        limit = self._attachment.message_bytes_max
        if not limit or len(record.body) <= limit:
            return None
        return f"body of {len(record.body)} bytes exceeds the group's message_bytes_max {limit}"

    def _report_corrupt(self, local_seq: int, problem: str) -> None:
        """A record the drain cannot send: logged and heard by listeners (kind
        "corrupt"), never skipped in silence."""
        message = f"client SAF record {local_seq} cannot be read ({problem}); not sent"
        log.error("%s", message)
        self._status.notify(JournalEvent("corrupt", Status.JOURNAL_FAIL, local_seq, None, message))

    def _send_drained(self, link: _Link, key: bytes, record: Record, window: _Window) -> None:
        extra = record.extra
        headers = dict(extra.get("headers") or {})
        key_id = self._journal.key_id_of(record)
        headers.setdefault(IDEMPOTENCY_HEADER, idempotency_key_for(key_id, record.seq))
        headers[wire.REPLY_WHEN_STORED_HEADER] = True
        headers[CLIENT_SAF_SEQ_HEADER] = record.seq
        if self._from_another_queue(record):
            headers[POSSIBLE_DUPLICATE_HEADER] = True
        headers[wire.CLIENT_SAF_BACKLOG_HEADER] = self._journal.count
        request = wire.Put(
            self._requests.next_id(),
            extra.get("target", f"{record.target_group}.{record.target_queue}"),
            record.body,
            record.delivery,
            record.uma,
            record.msg_class,
            record.msg_type,
            record.priority,
            extra.get("timeout_ms", 0),
            record.correlation_id,
            extra.get("resp_q", ""),
            headers,
        )

        def answered(result: object) -> None:
            window.remove(key)
            self._drain_answered(link, key, record, result)
            self._wake.set()

        wait_s = put_reply_wait_s(request.timeout_ms / 1000)

        def unanswered() -> None:
            log.warning(
                "client SAF record %d: no answer from the server in %.0f s; reconnecting "
                "to drain again from the oldest record",
                record.seq,
                wait_s,
            )
            self._requests.lose(link, ConnectionLost(Status.LINK_DOWN, "drained put not answered"))

        pending = _DrainedPut("drain", callback=answered, unanswered=unanswered)
        self._requests.pending[request.request_id] = pending
        self._requests.deadlines.add_after(wait_s, request.request_id, pending)
        self._requests.send(link, request)

    def _from_another_queue(self, record: Record) -> bool:
        """Whether `record` was journaled by a client attached to another queue than
        this one: then it is sent marked a possible duplicate (POSSDUPL), logged once
        per queue. Why: the group scopes idempotency keys by sender queue, so a record
        the earlier client's drain had stored (killed before its delete committed) was
        stored again under this queue's scope, and its receiver got it twice, the
        second copy unmarked. A record whose queue is not known is compared by the
        text the application attached with; a name against numbers counts as another
        queue (a mark too many, never a copy unmarked)."""
        queue = self._attachment.queue
        if queue is None:
            return False
        if record.source_queue:
            other = (record.source_group, record.source_queue) != (queue.group, queue.queue)
        else:
            attach = str(record.extra.get("attach") or "")
            other = bool(attach) and attach != self._queue_text and attach != str(queue)
        if other and (record.source_group, record.source_queue) not in self._other_queues:
            self._other_queues.add((record.source_group, record.source_queue))
            log.warning(
                "client SAF record %d was journaled from queue %s, and this client is "
                "attached to %s: the group cannot tell whether it stored it before (its "
                "dedupe is per sender queue), so it is sent marked POSSDUPL, as are the "
                "others from that queue",
                record.seq,
                record.extra.get("attach") or f"{record.source_group}.{record.source_queue}",
                queue,
            )
        return other

    def _drain_answered(self, link: _Link, key: bytes, record: Record, result: object) -> None:
        local_seq = record.seq
        if isinstance(result, wire.PutDone):
            if result.uma_status in _UMA_LOST and record.delivery not in _AK_MODES:
                self._not_kept(key, record, result)
                return
            self._holding_logged = False
            if self._refusals is not None and self._refusals.local_seq == local_seq:
                self._refusals = None
            self._journal.remove([key])
            self._status.notify(JournalEvent("drained", Status.SUCCESS, local_seq, _psb(result)))
        elif isinstance(result, wire.Failure) and result.status not in PASSING_REFUSALS:
            self._reject(key, record, result.status, result.message)
        elif isinstance(result, wire.Failure) and self._refused_again(key, record, result):
            return  # kept aside: the drain goes on with the records after it
        elif isinstance(result, wire.Failure) and self._requests.link is link:
            # Left in the journal; drop the connection so the drain restarts from the
            # oldest record (the server dedupes what it already stored). EXCEEDQUOTA is
            # the server's per-connection bound (requests_in_flight_max,
            # connection_bytes_max): the window was too wide, not the record wrong.
            if result.status == Status.EXCEEDQUOTA:
                self.window_messages = max(1, self.window_messages // 2)
                self.window_bytes = max(1, self.window_bytes // 2)
            self._requests.lose(
                link, ConnectionLost(Status.LINK_DOWN, f"drain refused: {result.message}")
            )
        elif not isinstance(result, MrsError | wire.Failure) and self._requests.link is link:
            # A broken server's answer of another kind (a Confirmed): before, the record
            # was left and the drain went on with the newer ones, which were stored
            # before it (out of order). Dropped as a refusal that passes is, so the
            # drain starts again from the oldest record.
            name = type(result).__name__
            self._requests.lose(
                link,
                ConnectionLost(Status.LINK_DOWN, f"the server answered a drained put with {name}"),
            )

    def _refused_again(self, key: bytes, record: Record, result: wire.Failure) -> bool:
        """Whether a record refused with a status that passes by waiting has been
        refused so CLIENT_SAF_REFUSALS_MAX times in a row, over at least
        CLIENT_SAF_REFUSALS_SPAN_S: then it is kept aside as refused (`_reject`, the
        status named) and True. Only statuses the record itself can cause count: a
        SERVER_ERROR (the group failed on it), a TIMEOUT, an EXCEEDQUOTA once the
        window is one record (the record alone is over the connection's bound);
        SHUTTING_DOWN, QUEUE_BUSY, LINK_DOWN, JOURNAL_FAIL say the group's state.

        Why: the drain is FIFO, and after such a refusal it reconnects and sends the
        oldest record first, so one record the group failed on every time (a bug its
        contents trigger) held every record behind it, to every target, for ever,
        with one WARNING per reconnect. Kept aside it is not lost: the application
        sends it again with `redrive_refused` once the group is fixed."""
        status = result.status
        counted = status in (Status.SERVER_ERROR, Status.TIMEOUT) or (
            status == Status.EXCEEDQUOTA and self.window_messages == 1
        )
        if not counted:
            return False
        now = trio.current_time()
        refusals = self._refusals
        if refusals is None or refusals.local_seq != record.seq:
            refusals = self._refusals = _Refusals(record.seq, now)
        refusals.count += 1
        span_s = now - refusals.first_at
        if refusals.count < CLIENT_SAF_REFUSALS_MAX or span_s < CLIENT_SAF_REFUSALS_SPAN_S:
            return False
        self._refusals = None
        self._reject(
            key,
            record,
            status,
            f"refused {refusals.count} times in a row over {span_s:.1f} s ({_name(status)}: "
            f"{result.message}); taken as caused by this record",
        )
        return True

    def _not_kept(self, key: bytes, record: Record, result: wire.PutDone) -> None:
        """The server answered a drained put but kept the message nowhere: it could not
        reach its interest point (a full DQF, no DQF) and its UMA failed too (SAF for a
        queue of the server's own group, a DLJ at its cap). Why not "drained": the put
        was answered STORED when it was journaled, and its record was deleted, so the
        message was lost with no word to anyone. A cause that passes (DQF_FULL,
        MRS_RES_EXH, a device) keeps the record, sent again after a pause
        (`_retry_at`), as the group keeps a message in its SAF; one that cannot pass
        (NO_DQF, NOSUCHQUEUE) is refused for good, as the group refuses such a put. An AK
        put's MRS_ACK already tells its sender, as it would a connected put's."""
        cause, uma = _name(result.delivery_status), _name(result.uma_status)
        why = f"the group could not store it ({cause}) and its UMA failed ({uma})"
        if result.delivery_status in _CAUSES_FOR_GOOD:
            self._reject(key, record, result.delivery_status, why)
            return
        if self._retry_at is None:
            self._retry_at = trio.current_time() + CLIENT_SAF_DELETE_RETRY_S
        if not self._holding_logged:  # one line per run of them, not one per record
            self._holding_logged = True
            log.warning(
                "client SAF record %d not kept: %s; it stays in the journal and is sent "
                "again in %g s",
                record.seq,
                why,
                CLIENT_SAF_DELETE_RETRY_S,
            )

    def _reject(self, key: bytes, record: Record, status: int, message: str) -> None:
        """A record the server refuses for good: logged, moved out of the drain into
        the journal's refused records (its put was answered STORED: never deleted in
        silence; the application sends it again with `redrive_refused` once the cause
        is fixed, e.g. the put right given back) and heard by listeners ("rejected").
        The drain goes on with the records after it."""
        log.warning(
            "client SAF record %d refused by the server (%s): %s; kept aside in the "
            "journal (refused_records(), redrive_refused())",
            record.seq,
            _name(status),
            message,
        )
        self._journal.refuse(key, record, status, message)
        self._status.notify(JournalEvent("rejected", status_of(status), record.seq, None, message))


def _psb(reply: wire.PutDone) -> Psb:
    """The Psb of a put's answer. A stored put's (SUCCESS, STORED, NO_UMA), nearly
    every answer, skips the three status lookups (0.2 µs of each put, benchmarks/README.md)."""
    status, delivery_status, uma_status = reply.status, reply.delivery_status, reply.uma_status
    if status == _SUCCESS and delivery_status == _STORED and uma_status == _NO_UMA:
        return Psb(_SUCCESS_STATUS, _STORED_STATUS, reply.seq, _NO_UMA_STATUS)
    return Psb(status_of(status), status_of(delivery_status), reply.seq, status_of(uma_status))


_SUCCESS_STATUS, _STORED_STATUS, _NO_UMA_STATUS = Status.SUCCESS, Status.STORED, Status.NO_UMA
_UMA_LOST = frozenset(
    int(status)
    for status in (Status.SAF_FAILED, Status.DLJ_FAILED, Status.DLQ_FAILED, Status.RTS_FAIL)
)
"""A drained put's UMA status saying the message is nowhere (a discard is the sender's
choice: DISC_FAILED and DISCL_FAILED discarded it all the same)."""
_CAUSES_FOR_GOOD = frozenset(
    int(status) for status in (Status.NO_DQF, Status.NOSUCHQUEUE, Status.MSGTOOBIG)
)
"""Why a message was not kept that no wait heals: the group's configuration."""
_AK_MODES = frozenset(int(mode) for mode in DeliveryMode if mode.notification is Notification.AK)
_SUCCESS, _STORED, _NO_UMA = int(_SUCCESS_STATUS), int(_STORED_STATUS), int(_NO_UMA_STATUS)


def address_problem(text: str) -> str | None:
    """Why every group refuses `text` as a put's target or resp_q whatever its
    configuration (not an address, or an id out of range), in the group's words
    (mrs.config.schema.BusConfig.resolve); None when only names are left, which the
    group resolves when the record drains.

    Why here: a journaled put is answered STORED, and one the group refused at drain
    time NOSUCHQUEUE left the journal with a WARNING: a mistyped `1.0` or `2.1000`,
    refused at once while connected, was acknowledged and then lost."""
    group_text, dot, queue_text = text.strip().partition(".")
    if not dot:  # a queue of the sender's group: any group id stands for it here
        group_text, queue_text = str(GROUP_IDS[0]), group_text
    if not group_text or not queue_text or "." in queue_text:
        return f"not a queue address (GROUP.QUEUE, QUEUE or names): {text!r}"
    for kind, part, (low, high) in (
        ("group", group_text, GROUP_IDS),
        ("queue", queue_text, QUEUE_IDS),
    ):
        if _ID_PATTERN.fullmatch(part):
            if not low <= int(part) <= high:
                return f"{kind} {int(part)} out of range {low}..{high} in address {text!r}"
        elif not NAME_PATTERN.fullmatch(part):
            return f"not a {kind} id or name in address {text!r}: {part!r}"
    return None


GROUP_IDS = (GROUP_ID_MIN, GROUP_ID_MAX)
QUEUE_IDS = (QUEUE_ID_MIN, QUEUE_ID_MAX)
_ID_PATTERN = re.compile(r"[0-9]+")
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Group and queue ids and names as the bus file allows them: the ids from mrs.limits,
as mrs.config.schema reads them; the name pattern is the schema's, copied (a test
pins them equal): the schema itself would cost `import clients` a tenth of a second."""


def _numeric(target: str) -> tuple[int, int]:
    try:
        address = Address.parse(target)
    except ValueError:
        return 0, 0  # a queue name: the server resolves it at drain time
    return address.group, address.queue


def _name(status: int) -> str:
    value = status_of(status)
    return value.name if isinstance(value, Status) else str(value)
