"""What a simulated run recorded: each put and its answers, deliveries, confirms, crashes.

Workloads and scenarios fill a `History` as the run goes (positions in the delivery
list order everything); `sim.checker.check` judges it afterwards, and `to_json`
keeps it for replaying a failing seed's story.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace

from mrs.model import DeliveryMode, Notification, Status

STORED_STATUSES = {int(Status.STORED), int(Status.SAF_FORCED)}


@dataclass
class Sent:
    message_id: str
    producer: str
    target: str
    mode: int
    uma: int
    in_order: bool = False
    priority: int = 0
    """The put's priority: order is promised per (sender, target, priority)."""
    delivery_status: int | None = None
    uma_status: int | None = None
    seq: int = 0
    mrs_acked: bool = False
    """An AK put whose statuses come from its MRS_ACK (its final PSB)."""
    faults_at_put: int = 0
    """Faults recorded before the put was sent, and before its answer (set by History)."""
    faults_at_answer: int = -1
    deliveries_at_put: int = 0
    sends_at_answer: int = 0
    """Puts recorded before this one's answer came (they may have reached the server first)."""


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
    confirms: list[tuple[str, str, int]] = field(default_factory=list)
    """(message id, queue, position in `deliveries` when its confirm was answered)."""
    lost_gets: list[tuple[str, int]] = field(default_factory=list)
    """(queue, position in `deliveries`) of gets whose answer never arrived."""
    unsure_confirms: set[str] = field(default_factory=set)
    """Messages whose confirm was sent but whose answer never arrived."""
    walk_aways: list[tuple[str, str, int]] = field(default_factory=list)
    """(queue, message id, position): a consumer left with this message unconfirmed."""
    crashes: list[tuple[int, int]] = field(default_factory=list)
    """(group, position in `deliveries`) of each crash."""
    in_order_queues: set[str] = field(default_factory=set)
    """Queues confirmed in order with one get at a time (what comes back first is known)."""
    mrs_acks: dict[int, tuple[int, int]] = field(default_factory=dict)
    """seq -> (delivery status, UMA status) from the MRS_ACKs AK senders got back."""
    observed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """How often each notable status was seen (puts' PSBs, refused gets): coverage."""
    refused: set[str] = field(default_factory=set)
    """Puts the server refused (e.g. NOTSUPPORTED): they must never arrive."""
    leftovers: dict[str, list[str]] = field(default_factory=dict)
    """After the final drain: "g<N> DQF" / "g<N> SAF" -> message ids still there."""
    never_started: list[str] = field(default_factory=list)
    """Groups that could not be started at all (the seed ended there), and why."""
    died: list[str] = field(default_factory=list)
    """Real processes (`mrs sim run`): groups whose server exited with no fault asking
    for it, and their last words (the run ended there)."""
    mrs_ack_counts: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    """seq -> how many MRS_ACKs came back for it (exactly one is the rule)."""
    selection_mismatches: list[str] = field(default_factory=list)
    """Selective gets answered with a message their Selection does not match."""

    def record_send(self, sent: Sent) -> None:
        self.sent[sent.message_id] = sent
        sent.faults_at_put, sent.deliveries_at_put = len(self.events), len(self.deliveries)

    def record_outcome(
        self, message_id: str, delivery_status: int, uma_status: int, seq: int
    ) -> None:
        sent = self.sent[message_id]
        sent.delivery_status, sent.uma_status, sent.seq = delivery_status, uma_status, seq
        sent.faults_at_answer, sent.sends_at_answer = len(self.events), len(self.sent)
        self.record_observed(f"put {status_name(delivery_status)}")
        if uma_status not in (int(Status.NO_UMA), int(Status.UMA_NA)):
            self.record_observed(f"uma {status_name(uma_status)}")

    def record_mrs_ack(self, seq: int, delivery_status: int, uma_status: int) -> None:
        self.mrs_acks[seq] = (delivery_status, uma_status)
        self.mrs_ack_counts[seq] += 1
        self.record_observed(f"mrs_ack {status_name(delivery_status)}")

    def record_observed(self, what: str) -> None:
        self.observed[what] += 1

    def record_delivery(self, message_id: str, queue: str, status: int) -> None:
        self.deliveries.append((message_id, queue, int(status)))

    def record_confirm(self, message_id: str, queue: str) -> None:
        self.confirms.append((message_id, queue, len(self.deliveries)))

    def record_lost_get(self, queue: str) -> None:
        self.lost_gets.append((queue, len(self.deliveries)))

    def record_walk_away(self, queue: str, message_id: str) -> None:
        self.walk_aways.append((queue, message_id, len(self.deliveries)))

    def record_crash(self, group_id: int) -> None:
        self.crashed_groups.add(group_id)
        self.crashes.append((group_id, len(self.deliveries)))

    def record_unsure_confirm(self, message_id: str) -> None:
        self.unsure_confirms.add(message_id)

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
                "confirms": self.confirms,
                "lost_gets": self.lost_gets,
                "unsure_confirms": sorted(self.unsure_confirms),
                "walk_aways": self.walk_aways,
                "crashes": self.crashes,
                "in_order_queues": sorted(self.in_order_queues),
                "mrs_acks": sorted(self.mrs_acks.items()),
                "observed": dict(self.observed),
                "refused": sorted(self.refused),
                "leftovers": self.leftovers,
                "never_started": self.never_started,
                "died": self.died,
            },
            sort_keys=True,
        )


def status_name(value: int) -> str:
    try:
        return Status(value).name
    except ValueError:
        return str(value)


def with_mrs_ack(history: History, sent: Sent) -> Sent:
    """An AK put as its MRS_ACK reported it (its PSB), if the ack came back."""
    ack = history.mrs_acks.get(sent.seq) if sent.seq else None
    if ack is None or DeliveryMode(sent.mode).notification is not Notification.AK:
        return sent
    return replace(sent, delivery_status=ack[0], uma_status=ack[1], mrs_acked=True)
