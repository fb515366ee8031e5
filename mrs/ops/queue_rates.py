"""Per-queue delivery and confirm counts for the web view's rates.

Why counted as replies leave (like mrs.ops.metrics) and not in the queues: the
group's hot paths stay as they are, and the count costs only where a web view is on
(`[group.ops] web_listen`). A Delivery names its queue; a Confirmed is counted on the
queue its connection is attached to. What was published is derived by the page from
these and the queue's depth: what arrived is the change in waiting + unconfirmed,
plus what left by a confirm or by a delivery that needs none (a memory message
without an ACK interest point). An operator's purge shows as no arrival; a move as
an arrival on its target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from mrs import protocol as wire
from mrs.model import Status

_NEEDS_CONFIRM = frozenset({int(Status.CONFIRMREQ), int(Status.POSSDUPL)})


class QueueCounts:
    """Running totals per queue address ("G.Q"): deliveries, of those the ones that
    need no confirm, and confirms."""

    def __init__(self) -> None:
        self.delivered: Counter[str] = Counter()
        self.delivered_final: Counter[str] = Counter()
        self.confirmed: Counter[str] = Counter()

    def observer(
        self, session: object, chain: Callable[[object], None] | None
    ) -> Callable[[object], None]:
        """What `session` calls with every reply it sends (after `chain`, the metrics')."""

        def observe(event: object) -> None:
            if chain is not None:
                chain(event)
            if isinstance(event, wire.Delivery):
                self._delivered(event)
            elif isinstance(event, wire.DeliveryBatch):
                for delivery in event.deliveries:
                    self._delivered(delivery)
            elif isinstance(event, wire.Confirmed) and event.status == Status.SUCCESS:
                queue = getattr(session, "attached", None)
                if queue is not None:
                    self.confirmed[str(queue.address)] += 1

        return observe

    def _delivered(self, delivery: wire.Delivery) -> None:
        self.delivered[delivery.target] += 1
        if delivery.delivery_status not in _NEEDS_CONFIRM:
            self.delivered_final[delivery.target] += 1

    def add_to(self, queues: dict) -> dict:
        """The status's `queues` table with each queue's totals beside its depth."""
        for address, queue in queues.items():
            queue["delivered_total"] = self.delivered[address]
            queue["delivered_final_total"] = self.delivered_final[address]
            queue["confirmed_total"] = self.confirmed[address]
        return queues
