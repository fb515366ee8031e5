"""MRS_ACKs: made (`MrsAcks`) and, while one commit's answers are reported, offered to
their queues together once the report ends (`HeldOffers`). Compiled
(mrs.native.loader): an AK producer's server makes one MRS_ACK per put.

Why held: one commit reports hundreds of AK puts at once. Offered one by one, the
first MRS_ACK wakes the sender's parked GetBatch and leaves alone in its frame, and
the rest wait for the client's next GetBatch: a round trip more per commit for every
AK producer (benchmarks/README.md). Held until the report ends, the parked GetBatch takes them
all (with read-ahead, up to READ_AHEAD_MAX) in one frame. The order does not change:
they join the queue in the order they were made, and parked gets are served oldest
first, as `TargetQueue.offer` would have.

Only the inline writer's commits are held (`mrs.server.group_server` enters `HeldOffers` around
`commit_pending`): an AK_DQF put's MRS_ACK and an AK_CONF put's (made when the
confirm's commit is reported) wait for the report's end; one made outside a commit's
report (an AK_DEQ message taken by a get) or in the thread writer's reports is
offered at once.

Why compiled: interpreted, making and offering an MRS_ACK was 7% of the server's
samples in `mrs bench`'s AK row (perf; benchmarks/README.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import msgspec

from mrs.core.refusals import RefusalLog
from mrs.group.context import GroupContext
from mrs.group.queues import TargetQueue
from mrs.group.sequence import Sequence
from mrs.group.shapes import Entry, mrs_ack_entry
from mrs.model import Address, Psb

_ENCODE: Final = msgspec.msgpack.Encoder().encode
"""An MRS_ACK's body: msgpack of the PSB (the bytes msgpack.packb writes), per AK put."""
log = logging.getLogger("mrs.group")


class HeldOffers:
    """Offers to queues, held from `__enter__` to `__exit__` (a commit's report), then
    each parked get takes its share (`serve`: the hand-over's `serve_waiting_gets`)."""

    def __init__(self) -> None:
        self._holding = False
        self._queues: dict[int, TargetQueue] = {}
        """The queues offered to while holding, by id, in first-offer order."""
        self.serve: Callable[[TargetQueue], None] | None = None
        """Set once the hand-over exists (mrs.group.wiring)."""

    def offer(self, queue: TargetQueue, entry: Entry) -> None:
        if not self._holding:
            queue.offer(entry)
            return
        queue.put_back(entry, False)  # by position: a compiled method (front=False)
        self._queues[id(queue)] = queue

    def __enter__(self) -> None:
        self._holding = True

    def __exit__(self, *exc_info: object) -> None:
        self._holding = False
        queues, self._queues = self._queues, {}
        serve = self.serve
        if serve is None:  # no hand-over yet: offered as they came, nobody to serve
            return
        for queue in queues.values():
            serve(queue)


class MrsAcks:
    """Makes the MRS_ACK (class 28, type -801, body = the PSB) owed to an AK sender
    and offers it to the sender's queue; one for a queue in another group leaves
    through the ack outbox (journaled until the peer has it, mrs.group.acks)."""

    def __init__(
        self, ctx: GroupContext, sequence: Sequence, ack_outbox: Any, offers: HeldOffers
    ) -> None:
        self.ctx = ctx
        self.sequence = sequence
        self.ack_outbox = ack_outbox
        self.offers = offers
        self.source = Address(ctx.group_id, 0)
        """Every MRS_ACK's source (queue 0 of this group): one Address, not one per ack."""
        self.dropped = RefusalLog(log, level=logging.WARNING, line_format="{message}")
        """MRS_ACKs for a temporary queue nobody is attached to (`send`), dropped."""
        self.sent: dict[tuple[int, int, int], int] = {}
        """(status, delivery status, UMA status) of each MRS_ACK made -> how many: an
        AK put's outcome, which its put's answer (UMA_NA) did not say (`mrs_acks_total`,
        mrs.ops.metrics)."""

    def send(self, response_queue: Address, psb: Psb) -> None:
        ctx = self.ctx
        group_id = ctx.group_id
        remote = response_queue.group != group_id
        queue = None if remote else ctx.queues.get(response_queue.queue)
        if queue is None and not remote:
            log.error(
                "MRS_ACK for seq %d: group %d has no queue %s", psb.seq, group_id, response_queue
            )
            return
        if queue is not None and not queue.active:
            # A temporary queue whose program left: as MessageQ's, it no longer exists
            # (NOTACTIVE), and an MRS_ACK kept there would wait for nobody. Dropped,
            # said once per REFUSAL_LOG_INTERVAL_S with a count (an AK producer that left
            # with thousands of puts in flight must not write a line for each).
            self.dropped.refused(
                "mrs-ack-notactive",
                str(response_queue),
                f"MRS_ACK for seq {psb.seq} dropped: its response queue {response_queue} "
                "is temporary and nobody is attached to it (NOTACTIVE)",
            )
            return
        psb_wire = psb.to_wire()
        outcome = (psb_wire[0], psb_wire[1], psb_wire[3])
        sent = self.sent
        sent[outcome] = sent.get(outcome, 0) + 1
        ack = mrs_ack_entry(
            self.sequence.next(),
            _ENCODE(psb_wire),
            self.source,
            response_queue,
            ctx.clock_ns(),
            True,  # trusted: made by this server
        )
        if queue is None:  # remote: journaled until the peer has it (AckOutbox)
            self.ack_outbox.send(ack.seq, response_queue, psb_wire, ack.put_time_ns)
            return
        self.offers.offer(queue, ack)
