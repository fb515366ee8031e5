"""The checker: Jepsen-style invariants over a recorded history of a bus under faults.

A `History` records what producers sent and were told (the PSB), what consumers got
(and with which delivery status), where failed messages ended up (DLJ, DLQ, RTS),
and which groups crashed. `check(history)` returns the violations:

- lost: acknowledged as stored at a recoverable interest point (STORED, SAF_FORCED,
  CONF's SUCCESS, or UMA SAF_SUCCESS) -- in a WF put's answer, or in the MRS_ACK an
  AK put's sender got back -- but never delivered to its target;
- unexpected: delivered but never sent;
- unmarked duplicates: a recoverable message delivered again without POSSDUPL;
- marked first deliveries: a first delivery marked POSSDUPL that no lost get explains
  (the contract marks only a redelivery; a get whose answer was lost — connection
  dropped, group crashed, reply after the client gave up — may hide one delivery);
- redelivered after confirm: delivered again after its confirm was answered;
- unconfirmed lost: delivered, never confirmed (no confirm attempt whose answer was
  lost), and never delivered again: what a detach or reconnect must give back; and,
  on an in-order queue with one get at a time, a consumer that left with a message
  unconfirmed must get a redelivery (POSSDUPL) first when it comes back, unless its
  group crashed meanwhile (recovery reloads in sequence order);
- stuck: records left in a DQF or SAF after the final drain (every journal drains);
- order violations: on an in-order queue, a producer's recoverable messages of one
  priority first delivered out of the order they were sent (a higher priority may
  overtake a lower one: docs/delivery-modes.md);
- selection mismatches: a selective get answered with a message its Selection does
  not match;
- UMA mismatches: a failed put whose UMA says where the message went, and it is not
  there (DLJ, DLQ, RTS unless the group crashed, since those are memory), or a
  discarded message that was delivered anyway.

MessageQ conformance (sim.conformance_check):
- wrong UMAs: a failed put answered with another UMA's status than its sender chose,
  or a WF put answered SAF_FORCED with no SAF backlog that may be ahead of it and no
  fault near the put (after one DQF_FULL, the next puts must take their own UMA);
- MRS_ACK violations: every requested MRS_ACK arrives exactly once: an AK put
  acknowledged twice, or never although its message reached its interest point (and
  no crash excuses it), or with a status its mode cannot report;
- drain progress: a SAF drain that stalls leaves records in the SAF after the final
  drain ("stuck" above), and FIFO across a link in RETRY is the order rule above.

The record is `sim.history`; the core guarantees shared with the crash and
link-fault tests are `sim.delivery_check`; this module judges a whole history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from mrs.model import DeliveryMode, InterestPoint, Notification, Status
from sim.conformance_check import ACK_SUCCESS_STATUSES, mrs_ack_violations, wrong_umas
from sim.delivery_check import (
    DeliveryCheck,
    check_delivered,
    order_violations,
    producer_and_counter,
)
from sim.history import STORED_STATUSES, History, Sent, status_name, with_mrs_ack

__all__ = [
    "ACK_SUCCESS_STATUSES",
    "PROBLEMS",
    "STORED_STATUSES",
    "DeliveryCheck",
    "History",
    "Sent",
    "Verdict",
    "acknowledged_as_stored",
    "check",
    "check_delivered",
    "mrs_ack_violations",
    "order_violations",
    "producer_and_counter",
    "status_name",
    "wrong_umas",
]


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
    marked_first_deliveries: list[str] = field(default_factory=list)
    redelivered_after_confirm: list[str] = field(default_factory=list)
    unconfirmed_lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    wrong_umas: list[str] = field(default_factory=list)
    mrs_ack_violations: list[str] = field(default_factory=list)
    selection_mismatches: list[str] = field(default_factory=list)
    never_started: list[str] = field(default_factory=list)
    """A group could not be started at all: the seed ended there, unjudged."""
    died: list[str] = field(default_factory=list)
    """A group's server exited unbidden (`mrs sim run`): the run ended there, unjudged."""

    @property
    def ok(self) -> bool:
        return not any(getattr(self, name) for name in PROBLEMS)

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
            "marked_first_deliveries": len(self.marked_first_deliveries),
            "redelivered_after_confirm": len(self.redelivered_after_confirm),
            "unconfirmed_lost": len(self.unconfirmed_lost),
            "stuck": len(self.stuck),
            "wrong_umas": len(self.wrong_umas),
            "mrs_ack_violations": len(self.mrs_ack_violations),
            "selection_mismatches": len(self.selection_mismatches),
            "never_started": len(self.never_started),
            "died": len(self.died),
        }


PROBLEMS = (
    "lost",
    "unexpected",
    "unmarked_duplicates",
    "order_violations",
    "uma_mismatches",
    "marked_first_deliveries",
    "redelivered_after_confirm",
    "unconfirmed_lost",
    "stuck",
    "wrong_umas",
    "mrs_ack_violations",
    "selection_mismatches",
    "never_started",
    "died",
)
"""The Verdict lists that must be empty, in the order reports show them."""


def acknowledged_as_stored(sent: Sent) -> bool:
    if sent.delivery_status is None:
        return False
    mode = DeliveryMode(sent.mode)
    if not mode.recoverable or (mode.notification is not Notification.WF and not sent.mrs_acked):
        return False  # an AK/NN put's immediate answer only says it was accepted
    if sent.delivery_status in STORED_STATUSES:
        return True
    if DeliveryMode(sent.mode).interest_point is InterestPoint.CONF and sent.delivery_status == 1:
        return True
    return sent.uma_status == int(Status.SAF_SUCCESS)


def check(history: History) -> Verdict:
    verdict = Verdict(sent=len(history.sent))
    if history.never_started:  # the seed stopped early: the other checks would only
        verdict.never_started = list(history.never_started)  # list its missing drain
        return verdict
    if history.died:  # the same for a run that stopped when a server died unbidden
        verdict.died = list(history.died)
        return verdict
    first_delivery = _check_deliveries(history, verdict)
    verdict.delivered = len(first_delivery)
    for sent in history.sent.values():
        sent = with_mrs_ack(history, sent)  # noqa: PLW2901 - judged by what the sender knows
        if acknowledged_as_stored(sent):
            verdict.acknowledged += 1
            if sent.message_id not in first_delivery:
                verdict.lost.append(sent.message_id)
        mismatch = _uma_mismatch(history, sent, sent.message_id in first_delivery)
        if mismatch:
            verdict.uma_mismatches.append(f"{sent.message_id}: {mismatch}")
    verdict.order_violations = _order_violations(history, first_delivery)
    verdict.unconfirmed_lost = _unconfirmed_lost(history, first_delivery) + _skipped_returns(
        history
    )
    verdict.stuck = [
        f"{where}: {message_id}"
        for where, message_ids in sorted(history.leftovers.items())
        for message_id in message_ids
    ]
    verdict.wrong_umas = wrong_umas(history)
    verdict.mrs_ack_violations = mrs_ack_violations(history, first_delivery)
    verdict.selection_mismatches = list(history.selection_mismatches)
    return verdict


def _check_deliveries(history: History, verdict: Verdict) -> dict[str, int]:
    """Walk the deliveries in order; the position of each message's first delivery."""
    first_delivery: dict[str, int] = {}
    confirmed_at: dict[str, int] = {}
    for message_id, _, position in history.confirms:
        confirmed_at.setdefault(message_id, position)
    lost_gets_at: dict[str, list[int]] = defaultdict(list)
    for queue, position in history.lost_gets:
        lost_gets_at[queue].append(position)
    marked_first: dict[str, int] = defaultdict(int)
    for position, (message_id, queue, status) in enumerate(history.deliveries):
        sent = history.sent.get(message_id)
        if sent is None or message_id in history.refused:
            verdict.unexpected.append(message_id)
            continue
        if queue != sent.target:
            continue  # returned or dead-lettered copies are checked below
        if confirmed_at.get(message_id, position + 1) <= position:  # came after the answer
            verdict.redelivered_after_confirm.append(message_id)
        if message_id in first_delivery:
            if DeliveryMode(sent.mode).recoverable and status != int(Status.POSSDUPL):
                verdict.unmarked_duplicates.append(message_id)
            continue
        first_delivery[message_id] = position
        if status == int(Status.POSSDUPL):
            # each get whose answer was lost before this point may hide one delivery
            marked_first[queue] += 1
            explained = sum(1 for lost in lost_gets_at[queue] if lost <= position)
            if marked_first[queue] > explained:
                verdict.marked_first_deliveries.append(message_id)
    return first_delivery


def _unconfirmed_lost(history: History, first_delivery: dict[str, int]) -> list[str]:
    """Recoverable messages delivered for a confirm that never came, and never again."""
    confirmed = {message_id for message_id, _, _ in history.confirms}
    lost = []
    for message_id in first_delivery:
        sent = history.sent[message_id]
        if not DeliveryMode(sent.mode).recoverable:
            continue
        if message_id not in confirmed and message_id not in history.unsure_confirms:
            lost.append(message_id)
    return lost


def _skipped_returns(history: History) -> list[str]:
    """Walk-aways on in-order queues whose next delivery was not a redelivery, nor a
    message of a higher priority (which goes before it: docs/delivery-modes.md)."""
    skipped = []
    for queue, message_id, position in history.walk_aways:
        if queue not in history.in_order_queues:
            continue
        group_id = int(queue.split(".")[0])
        following = (
            (later, delivery)
            for later, delivery in enumerate(history.deliveries[position:], position)
            if delivery[1] == queue
        )
        later, delivery = next(following, (None, None))
        if delivery is None or delivery[2] == int(Status.POSSDUPL):
            continue
        left, came = history.sent.get(message_id), history.sent.get(delivery[0])
        if left is not None and came is not None and came.priority > left.priority:
            continue
        if any(g == group_id and position <= at <= later for g, at in history.crashes):
            continue
        skipped.append(f"{message_id} (left unconfirmed; {delivery[0]} came first)")
    return skipped


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
    def stream_of(message_id: str) -> tuple[str, int] | None:
        sent = history.sent[message_id]
        if not (sent.in_order and DeliveryMode(sent.mode).recoverable):
            return None
        stream = f"{sent.producer} -> {sent.target}"
        stream += f" priority {sent.priority}" if sent.priority else ""
        return stream, producer_and_counter(message_id)[1]

    return order_violations(first_delivery, stream_of)
