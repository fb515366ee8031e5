"""Room: a batch get (GetBatch) — up to N messages for one request, in one DeliveryBatch.

A prefetch, as RabbitMQ's prefetch and Redis's COUNT: the client asks for up to
`count_max` messages and gets those ready now (or, if none is, the first to arrive
within its timeout, with whatever else is ready then). Each message is delivered
by the functions that deliver a Get's one message (`Handover.count_delivery`,
`Handover.send_when_marked`): it counts against the queue's
unconfirmed cap, carries CONFIRMREQ or POSSDUPL, and a journaled one's delivery
count is durable before the batch is sent — one commit holds the marks of the whole
batch. A message delivered and not confirmed when the connection drops is what it
is after a Get: back to the front of the queue, delivered again with POSSDUPL.

Queues that confirm implicitly (each get confirms the message before) and the
dead-letter queue read under leases take their messages one get at a time: a batch
get there is refused BADPARAM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from mrs import protocol as wire
from mrs.core.delivery import EMPTY_GET_TEXT, Refused
from mrs.core.selection import Selection, from_wire
from mrs.group.context import GroupContext, Session, attached_queue
from mrs.group.handover import Handed, Handover
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.limits import DELIVERY_BATCH_BYTES_MAX
from mrs.model import Status
from mrs.protocol.base import build_unchecked
from mrs.protocol.event_types import DELIVERY_BATCH

DELIVERY_OVERHEAD_BYTES: Final = 256
"""A Delivery's fields besides its body and maps (ints, addresses), at most."""


@dataclass(eq=False)
class BatchGet:
    ctx: GroupContext
    handover: Handover

    def get_batch(self, session: Session, request: wire.GetBatch) -> None:
        queue = attached_queue(session)
        select = None if request.select is None else from_wire(request.select)
        if queue.config.confirm == "implicit" or queue.shared:
            why = "confirms implicitly" if not queue.shared else "is read under leases"
            raise Refused(
                Status.BADPARAM,
                f"queue {queue.address} {why}: take its messages one get at a time",
            )
        if not queue.can_deliver():
            if request.wait_at_cap and request.timeout_ms != 0:
                self._park(session, request, queue, select)  # served once a confirm frees room
                return
            raise Refused(
                Status.EXCMAXUNCONF,
                f"{len(queue.unconfirmed)} messages unconfirmed on {queue.address} "
                f"(unconfirmed_max={queue.config.unconfirmed_max})",
            )
        if self._hand_over(session, request, queue, None, select=select):
            return
        if request.timeout_ms == 0:
            raise Refused(Status.NOMOREMSG, f"{EMPTY_GET_TEXT} {queue.address}")
        self._park(session, request, queue, select)

    def _park(
        self,
        session: Session,
        request: wire.GetBatch,
        queue: TargetQueue,
        select: Selection | None = None,
    ) -> None:
        """Wait for a message, as a parked Get does (`Handover.park`), including one
        that reserves this get and commits its delivery mark with itself (premark)."""
        self.handover.park(
            session,
            queue,
            request.request_id,
            request.timeout_ms,
            lambda arrived, premarked=False: self._hand_over(
                session, request, queue, arrived, premarked, select
            ),
            select,
        )

    def _hand_over(
        self,
        session: Session,
        request: wire.GetBatch,
        queue: TargetQueue,
        first: Entry | None,
        premarked: bool = False,
        select: Selection | None = None,
    ) -> bool:
        """Deliver `first` (an arrival for a parked batch; `premarked`: its delivery
        mark was committed with it) and what else is ready, up to count_max, the
        unconfirmed cap and about DELIVERY_BATCH_BYTES_MAX; False if nothing could be
        delivered (the get still waits). Each is counted and the batch marked, sent
        or undone by the functions that hand over a Get's one message
        (`Handover.count_delivery`, `Handover.send_when_marked`)."""
        handover = self.handover
        taken: list[Handed] = []
        frame_bytes = 0
        entry = first
        while len(taken) < request.count_max:
            if entry is None:
                if not queue.can_deliver() or (entry := queue.take(select)) is None:
                    break
                if entry.body is None and not handover.load_body(queue, entry):
                    entry = None
                    continue
            size = _wire_bytes(entry)
            if taken and frame_bytes + size > DELIVERY_BATCH_BYTES_MAX:
                queue.put_back(entry)  # not taken: first in line for the next get
                break
            delivered = handover.count_delivery(request.request_id, queue, entry)
            if delivered is not None:
                taken.append(delivered)
                frame_bytes += size
            entry = None
        if not taken:
            return False
        if request.read_ahead_max and len(taken) == request.count_max and select is None:
            frame_bytes = self._read_ahead(request, queue, taken, frame_bytes)
        request_id = request.request_id
        # unchecked: every Delivery in it was built (and checked) by delivery_event
        answer = build_unchecked(DELIVERY_BATCH, request_id, [event for _, event, _ in taken])
        premarked_entry = first if premarked else None
        handover.send_when_marked(session, request_id, queue, taken, answer, premarked_entry)
        return True

    def _read_ahead(
        self,
        request: wire.GetBatch,
        queue: TargetQueue,
        taken: list[Handed],
        frame_bytes: int,
    ) -> int:
        """Add up to read_ahead_max more entries that may be lent: in memory only,
        needing no confirm, no sender waiting on their dequeue. Stops at the first
        that may not (it waits for a get of its own, in order). Returns the frame's
        bytes so far."""
        lent = 0
        while lent < request.read_ahead_max:
            entry = queue.take()
            if entry is None:
                break
            size = _wire_bytes(entry)
            if (
                entry.journaled
                or entry.needs_confirm
                or entry.on_dequeue is not None
                or entry.on_confirm is not None
                or frame_bytes + size > DELIVERY_BATCH_BYTES_MAX
            ):
                queue.put_back(entry)
                break
            delivered = self.handover.count_delivery(request.request_id, queue, entry)
            if delivered is None:
                continue
            taken.append(delivered)
            queue.lend(entry)
            frame_bytes += size
            lent += 1
        return frame_bytes

    def give_back(self, session: Session, request: wire.GiveBack) -> None:
        """The client closes with read-ahead messages no get took: they wait again
        (in order, before what came later) for the next reader."""
        queue = session.attached
        if queue is None or queue.shared:
            return
        if queue.give_back(request.seqs):
            self.handover.serve_waiting_gets(queue)


_ENCODE = msgspec.msgpack.Encoder().encode


def _wire_bytes(entry: Entry) -> int:
    """About how many bytes an entry's Delivery takes (never less): the frame of a
    batch stays within DELIVERY_BATCH_BYTES_MAX, well inside the frame limit."""
    size = DELIVERY_OVERHEAD_BYTES + len(entry.body or b"") + len(entry.correlation_id)
    if entry.headers:
        size += len(_ENCODE(entry.headers))
    if entry.dead_letter_header:
        size += len(_ENCODE(entry.dead_letter_header))
    return size
