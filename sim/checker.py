"""The checker: Jepsen-style invariants over a recorded history of a bus under faults.

A `History` records what producers sent and were told (the PSB), what consumers got
(and with which delivery status), where failed messages ended up (DLJ, DLQ, RTS),
and which groups crashed. `check(history)` returns the violations:

- lost: acknowledged as stored at a recoverable interest point (STORED, SAF_FORCED,
  CONF's SUCCESS, or UMA SAF_SUCCESS) but never delivered to its target;
- unexpected: delivered but never sent;
- unmarked duplicates: a recoverable message delivered again without POSSDUPL;
- order violations: on an in-order queue, a producer's recoverable messages first
  delivered out of the order they were sent;
- UMA mismatches: a failed put whose UMA says where the message went, and it is not
  there (DLJ, DLQ, RTS unless the group crashed, since those are memory), or a
  discarded message that was delivered anyway.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from mrs.model import DeliveryMode, Status

STORED_STATUSES = {int(Status.STORED), int(Status.SAF_FORCED)}


@dataclass
class Sent:
    message_id: str
    producer: str
    target: str
    mode: int
    uma: int
    in_order: bool = False
    delivery_status: int | None = None
    uma_status: int | None = None
    seq: int = 0


@dataclass
class History:
    seed: int = 0
    sent: dict[str, Sent] = field(default_factory=dict)
    deliveries: list[tuple[str, str, int]] = field(default_factory=list)
    """(message id, queue address, delivery status) in delivery order."""
    dead_letter_journal: set[str] = field(default_factory=set)
    dead_letter_queue: set[str] = field(default_factory=set)
    returned: set[str] = field(default_factory=set)
    crashed_groups: set[int] = field(default_factory=set)
    faults: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    events: list[dict] = field(default_factory=list)

    def record_send(self, sent: Sent) -> None:
        self.sent[sent.message_id] = sent

    def record_outcome(
        self, message_id: str, delivery_status: int, uma_status: int, seq: int
    ) -> None:
        sent = self.sent[message_id]
        sent.delivery_status, sent.uma_status, sent.seq = delivery_status, uma_status, seq

    def record_delivery(self, message_id: str, queue: str, status: int) -> None:
        self.deliveries.append((message_id, queue, int(status)))

    def record_fault(self, kind: str, detail: str = "") -> None:
        self.faults[kind] += 1
        self.events.append({"fault": kind, "detail": detail})

    def to_json(self) -> str:
        return json.dumps(
            {
                "seed": self.seed,
                "sent": [asdict(sent) for sent in self.sent.values()],
                "deliveries": self.deliveries,
                "dead_letter_journal": sorted(self.dead_letter_journal),
                "dead_letter_queue": sorted(self.dead_letter_queue),
                "returned": sorted(self.returned),
                "crashed_groups": sorted(self.crashed_groups),
                "faults": dict(self.faults),
                "events": self.events,
            },
            sort_keys=True,
        )


@dataclass
class Verdict:
    sent: int = 0
    acknowledged: int = 0
    delivered: int = 0
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    unmarked_duplicates: list[str] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)
    uma_mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.unmarked_duplicates
            or self.order_violations
            or self.uma_mismatches
        )

    def counts(self) -> dict[str, int]:
        return {
            "sent": self.sent,
            "acknowledged": self.acknowledged,
            "delivered": self.delivered,
            "lost": len(self.lost),
            "unexpected": len(self.unexpected),
            "unmarked_duplicates": len(self.unmarked_duplicates),
            "order_violations": len(self.order_violations),
            "uma_mismatches": len(self.uma_mismatches),
        }


def acknowledged_as_stored(sent: Sent) -> bool:
    if sent.delivery_status is None:
        return False
    if not DeliveryMode(sent.mode).recoverable:
        return False
    if sent.delivery_status in STORED_STATUSES:
        return True
    if DeliveryMode(sent.mode).interest_point == "CONF" and sent.delivery_status == 1:
        return True
    return sent.uma_status == int(Status.SAF_SUCCESS)


def check(history: History) -> Verdict:
    verdict = Verdict(sent=len(history.sent))
    first_delivery: dict[str, int] = {}
    for position, (message_id, queue, status) in enumerate(history.deliveries):
        sent = history.sent.get(message_id)
        if sent is None:
            verdict.unexpected.append(message_id)
            continue
        if queue != sent.target:
            continue  # returned or dead-lettered copies are checked below
        if message_id in first_delivery:
            if DeliveryMode(sent.mode).recoverable and status != int(Status.POSSDUPL):
                verdict.unmarked_duplicates.append(message_id)
            continue
        first_delivery[message_id] = position
    verdict.delivered = len(first_delivery)
    for sent in history.sent.values():
        if acknowledged_as_stored(sent):
            verdict.acknowledged += 1
            if sent.message_id not in first_delivery:
                verdict.lost.append(sent.message_id)
        mismatch = _uma_mismatch(history, sent, sent.message_id in first_delivery)
        if mismatch:
            verdict.uma_mismatches.append(f"{sent.message_id}: {mismatch}")
    verdict.order_violations = _order_violations(history, first_delivery)
    return verdict


def _uma_mismatch(history: History, sent: Sent, delivered: bool) -> str | None:
    if sent.delivery_status is None or sent.delivery_status > 0:
        return None
    if sent.uma_status is None or sent.uma_status < 0:
        return None  # the UMA failed: the sender was told the message is lost
    sender_group = int(sent.producer.split(".")[0])
    crashed = sender_group in history.crashed_groups
    status = Status(sent.uma_status)
    if status == Status.DLJ_SUCCESS and sent.message_id not in history.dead_letter_journal:
        return "UMA DLJ succeeded but the message is not in the DLJ"
    if (
        status == Status.DLQ_SUCCESS
        and not crashed
        and sent.message_id not in history.dead_letter_queue
    ):
        return "UMA DLQ succeeded but the message is not on the DLQ"
    if status == Status.RTS_SUCCESS and not crashed and sent.message_id not in history.returned:
        return "UMA RTS succeeded but the message did not come back"
    if status == Status.SAF_SUCCESS and not delivered:
        return "UMA SAF succeeded but the message was never delivered"
    # A recoverable message answered LINK_DOWN was never sent (one in flight when the
    # link dropped goes to the SAF instead). A nonrecoverable one in flight may have
    # arrived although its UMA ran: that ambiguity is documented, not a violation.
    if (
        status in (Status.DISC_SUCCESS, Status.DISCL_SUCCESS)
        and delivered
        and sent.delivery_status == int(Status.LINK_DOWN)
        and DeliveryMode(sent.mode).recoverable
    ):
        return "discarded (link down) but delivered anyway"
    return None


def _order_violations(history: History, first_delivery: dict[str, int]) -> list[str]:
    by_stream: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for message_id, position in first_delivery.items():
        sent = history.sent[message_id]
        if sent.in_order and DeliveryMode(sent.mode).recoverable:
            counter = int(message_id.rsplit(":", 1)[1])
            by_stream[(sent.producer, sent.target)].append((position, counter))
    violations = []
    for (producer, target), items in by_stream.items():
        counters = [counter for _, counter in sorted(items)]
        if counters != sorted(counters):
            violations.append(f"{producer} -> {target}")
    return violations
