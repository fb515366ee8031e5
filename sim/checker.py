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
- order violations: on an in-order queue, a producer's recoverable messages first
  delivered out of the order they were sent;
- UMA mismatches: a failed put whose UMA says where the message went, and it is not
  there (DLJ, DLQ, RTS unless the group crashed, since those are memory), or a
  discarded message that was delivered anyway.

MessageQ conformance (issue 9; separate functions at the end of this module):
- wrong UMAs: a failed put answered with another UMA's status than its sender chose,
  or a WF put answered SAF_FORCED with no SAF backlog that may be ahead of it and no
  fault near the put (after one DQF_FULL, the next puts must take their own UMA);
- MRS_ACK violations: every requested MRS_ACK arrives exactly once: an AK put
  acknowledged twice, or never although its message reached its interest point (and
  no crash excuses it), or with a status its mode cannot report;
- drain progress: a SAF drain that stalls leaves records in the SAF after the final
  drain ("stuck" above), and FIFO across a link in RETRY is the order rule above.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field, replace

from mrs.delivery import UMA_FAILURE, UMA_SUCCESS
from mrs.model import DeliveryMode, InterestPoint, Notification, Status, Uma

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
    mrs_ack_counts: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    """seq -> how many MRS_ACKs came back for it (exactly one is the rule)."""

    def record_send(self, sent: Sent) -> None:
        self.sent[sent.message_id] = sent
        sent.faults_at_put, sent.deliveries_at_put = len(self.events), len(self.deliveries)

    def record_outcome(
        self, message_id: str, delivery_status: int, uma_status: int, seq: int
    ) -> None:
        sent = self.sent[message_id]
        sent.delivery_status, sent.uma_status, sent.seq = delivery_status, uma_status, seq
        sent.faults_at_answer, sent.sends_at_answer = len(self.events), len(self.sent)
        self.record_observed(f"put {_status_name(delivery_status)}")
        if uma_status not in (int(Status.NO_UMA), int(Status.UMA_NA)):
            self.record_observed(f"uma {_status_name(uma_status)}")

    def record_mrs_ack(self, seq: int, delivery_status: int, uma_status: int) -> None:
        self.mrs_acks[seq] = (delivery_status, uma_status)
        self.mrs_ack_counts[seq] += 1
        self.record_observed(f"mrs_ack {_status_name(delivery_status)}")

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
    marked_first_deliveries: list[str] = field(default_factory=list)
    redelivered_after_confirm: list[str] = field(default_factory=list)
    unconfirmed_lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    wrong_umas: list[str] = field(default_factory=list)
    mrs_ack_violations: list[str] = field(default_factory=list)

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
)
"""The Verdict lists that must be empty, in the order reports show them."""


def _status_name(value: int) -> str:
    try:
        return Status(value).name
    except ValueError:
        return str(value)


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


def _with_mrs_ack(history: History, sent: Sent) -> Sent:
    """An AK put as its MRS_ACK reported it (its PSB), if the ack came back."""
    ack = history.mrs_acks.get(sent.seq) if sent.seq else None
    if ack is None or DeliveryMode(sent.mode).notification is not Notification.AK:
        return sent
    return replace(sent, delivery_status=ack[0], uma_status=ack[1], mrs_acked=True)


def check(history: History) -> Verdict:
    verdict = Verdict(sent=len(history.sent))
    first_delivery = _check_deliveries(history, verdict)
    verdict.delivered = len(first_delivery)
    for sent in history.sent.values():
        sent = _with_mrs_ack(history, sent)  # noqa: PLW2901 - judged by what the sender knows
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
    """Walk-aways on in-order queues whose next delivery was not a redelivery."""
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
        return f"{sent.producer} -> {sent.target}", producer_and_counter(message_id)[1]

    return order_violations(first_delivery, stream_of)


# ---------------------------------------------------------------------- issue 9
def wrong_umas(history: History) -> list[str]:
    """Each put that could not reach its interest point takes the UMA its sender chose;
    SAF_FORCED only behind a SAF backlog for that group (or when a fault caught the
    put in flight), never instead of the UMA."""
    problems = []
    sends = [_with_mrs_ack(history, sent) for sent in history.sent.values()]  # put order
    maybe_in_saf = [
        DeliveryMode(sent.mode).recoverable
        and (sent.delivery_status is None or not _known_not_in_saf(sent))
        for sent in sends
    ]
    for index, sent in enumerate(sends):
        mode = DeliveryMode(sent.mode)
        route = (_group(sent.producer), _group(sent.target))
        status = sent.delivery_status
        if status is not None and status < 0 and sent.uma_status is not None and sent.uma:
            action = Uma(sent.uma)
            if sent.uma_status not in (UMA_SUCCESS[action], UMA_FAILURE[action]):
                problems.append(
                    f"{sent.message_id}: {_status_name(status)} with UMA {action.name} "
                    f"answered {_status_name(sent.uma_status)}"
                )
        if status != int(Status.SAF_FORCED):
            continue
        impossible = mode.interest_point is InterestPoint.SAF or route[0] == route[1]
        backlog_possible = any(
            maybe_in_saf[other]
            and (_group(sends[other].producer), _group(sends[other].target)) == route
            for other in range(min(sent.sends_at_answer, len(sends)))
            if other != index
        )
        unexplained = (
            not backlog_possible
            and sent.faults_at_answer == 0  # no fault yet that could have caught it in flight
            and mode.notification is Notification.WF
        )
        if impossible or unexplained:
            problems.append(
                f"{sent.message_id}: SAF_FORCED with no SAF backlog that could be ahead "
                "of it (its UMA should have run)"
            )
    return problems


def mrs_ack_violations(history: History, first_delivery: dict[str, int]) -> list[str]:
    """Every requested MRS_ACK arrives exactly once, with a status its mode can report
    (issue 9): an AK put answered with a seq whose message reached its interest point
    (delivered for SAF/DQF/MEM/DEQ, confirmed for CONF/ACK) or whose UMA put it
    somewhere (DLJ, returned, DLQ) must have one MRS_ACK at its response queue after
    the final drain. Excused: puts whose response queue's group crashed after the put
    (the MRS_ACK sits in a memory queue a crash empties) and, for nonrecoverable
    DEQ/ACK puts to another group, puts whose target group crashed after them (the
    notice of the get or confirm is kept in memory until the sender's group has it).
    A put that was never answered (timed out, cancelled, refused) has no seq and is
    not judged."""
    confirmed = {message_id for message_id, _, _ in history.confirms}
    confirm_sent = confirmed | history.unsure_confirms
    problems = []
    for sent in history.sent.values():
        mode = DeliveryMode(sent.mode)
        if (
            not sent.seq
            or mode.notification is not Notification.AK
            or sent.message_id in history.refused
        ):
            continue
        count = history.mrs_ack_counts.get(sent.seq, 0)
        if count > 1:
            problems.append(f"{sent.message_id}: {count} MRS_ACKs")
        elif count == 1:
            problem = _wrong_ack_status(mode, history.mrs_acks[sent.seq], sent, confirm_sent)
            if problem:
                problems.append(f"{sent.message_id}: {problem}")
        elif _ack_owed(history, sent, first_delivery, confirmed) and not _ack_excused(
            history, sent
        ):
            problems.append(f"{sent.message_id}: no MRS_ACK ({mode.name} reached its point)")
    return problems


ACK_SUCCESS_STATUSES = {
    "SAF": {int(Status.STORED)},
    "DQF": {int(Status.STORED), int(Status.SAF_FORCED)},
    "CONF": {int(Status.SUCCESS), int(Status.STORED)},  # STORED: a duplicate's first copy
    "MEM": {int(Status.ENQUEUED), int(Status.UNATTACHEDQ)},
    "DEQ": {int(Status.SUCCESS)},
    "ACK": {int(Status.SUCCESS)},
}
"""What an MRS_ACK may say when its message reached its interest point."""


def _wrong_ack_status(
    mode: DeliveryMode, ack: tuple[int, int], sent: Sent, confirm_sent: set[str]
) -> str | None:
    delivery_status, _ = ack
    if delivery_status < 0:
        return None  # a failure: its UMA status is judged by wrong_umas
    if delivery_status not in ACK_SUCCESS_STATUSES[mode.interest_point]:
        return f"{mode.name}'s MRS_ACK says {_status_name(delivery_status)}"
    if (
        mode.interest_point in (InterestPoint.CONF, InterestPoint.ACK)
        and sent.message_id not in confirm_sent
    ):
        return f"{mode.name}'s MRS_ACK says confirmed, but no confirm was ever sent"
    return None


def _ack_owed(
    history: History, sent: Sent, first_delivery: dict[str, int], confirmed: set[str]
) -> bool:
    """The history shows the put's outcome was decided (so its MRS_ACK was sent)."""
    mode = DeliveryMode(sent.mode)
    message_id = sent.message_id
    if mode.interest_point in (InterestPoint.CONF, InterestPoint.ACK):
        reached = message_id in confirmed
    else:
        reached = message_id in first_delivery or message_id in history.dead_letter_queue
    return reached or message_id in history.dead_letter_journal or message_id in history.returned


def _ack_excused(history: History, sent: Sent) -> bool:
    """A crash after the put may have lost its MRS_ACK legitimately: of the response
    queue's group (the MRS_ACK waits in a memory queue there) or, for a nonrecoverable
    DEQ/ACK put to another group, of the target group (the message and the notice of
    its get or confirm are kept in memory there)."""
    response_group = _group(sent.producer)  # the workload's response queue: its own
    mode = DeliveryMode(sent.mode)
    groups = {response_group}
    if not mode.recoverable and mode.interest_point in (InterestPoint.DEQ, InterestPoint.ACK):
        groups.add(_group(sent.target))
    return any(
        group in groups and position >= sent.deliveries_at_put
        for group, position in history.crashes
    )


def _known_not_in_saf(sent: Sent) -> bool:
    """The sender knows this put did not leave a record in its SAF."""
    mode = DeliveryMode(sent.mode)
    if mode.notification is not Notification.WF and not sent.mrs_acked:
        return False
    if sent.delivery_status == int(Status.SAF_FORCED):
        return False
    if mode.interest_point is InterestPoint.SAF and sent.delivery_status == int(Status.STORED):
        return False
    return sent.uma_status != int(Status.SAF_SUCCESS)


def _group(address: str) -> int:
    return int(address.split(".")[0])


# ---------------------------------------------------------------------- the core
@dataclass
class DeliveryCheck:
    """The three guarantees every run is judged by — the swarm (via `check`), the crash
    and link-fault tests and `mrs demo`: nothing acknowledged as stored is lost, a
    stored message delivered again is marked POSSDUPL, and each sender's messages
    arrive in the order sent (on in-order queues)."""

    acknowledged: int = 0
    delivered: int = 0
    lost: list[str] = field(default_factory=list)
    unmarked_duplicates: list[str] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    marked_redeliveries: int = 0
    """Deliveries marked POSSDUPL (allowed: handed out before a failure, unconfirmed)."""
    resent_copies: int = 0
    """A message id stored again as another message (a resend after a lost answer)."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unmarked_duplicates or self.order_violations) and not (
            self.unexpected
        )

    def failures(self) -> str:
        """One line per broken guarantee, with a few examples ('' when ok)."""
        lines = []
        for name in ("lost", "unmarked_duplicates", "order_violations", "unexpected"):
            found = getattr(self, name)
            if found:
                lines.append(f"{name}: {len(found)}, e.g. {sorted(map(str, found))[:5]}")
        return "\n".join(lines)


def producer_and_counter(message_id: str) -> tuple[str, int]:
    """The message ids runs use, "<producer>:<counter>": who sent it, and its number."""
    producer, _, counter = message_id.rpartition(":")
    return producer, int(counter)


def order_violations(
    first_delivery: dict[str, int], stream_of: Callable[[str], tuple[str, int] | None]
) -> list[str]:
    """Streams whose messages were first delivered out of their counters' order.
    `stream_of(message_id)` is (stream name, counter), or None for no order promise."""
    by_stream: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for message_id, position in first_delivery.items():
        stream = stream_of(message_id)
        if stream is not None:
            by_stream[stream[0]].append((position, stream[1]))
    violations = []
    for name, items in by_stream.items():
        counters = [counter for _, counter in sorted(items)]
        if counters != sorted(counters):
            violations.append(name)
    return violations


def check_delivered(
    acknowledged: Iterable[str],
    deliveries: Iterable[tuple[str, int] | tuple[str, int, object]],
    *,
    sent: Collection[str] | None = None,
    stream_of: Callable[[str], tuple[str, int] | None] = producer_and_counter,
) -> DeliveryCheck:
    """Judge deliveries (message id, delivery status[, the stored message's identity,
    e.g. its seq]) in the order receivers got them against the ids acknowledged as
    stored. Without an identity, a message id delivered twice is one stored message
    delivered twice; with one, the same id under another identity is a resend."""
    result = DeliveryCheck()
    first_delivery: dict[str, int] = {}
    identities_seen: set[object] = set()
    for position, (message_id, status, *identity) in enumerate(deliveries):
        stored = identity[0] if identity else message_id
        if sent is not None and message_id not in sent:
            result.unexpected.append(message_id)
            continue
        if int(status) == int(Status.POSSDUPL):
            result.marked_redeliveries += 1
        if stored in identities_seen:
            if int(status) != int(Status.POSSDUPL):
                result.unmarked_duplicates.append(message_id)
        elif message_id in first_delivery:
            result.resent_copies += 1
        identities_seen.add(stored)
        first_delivery.setdefault(message_id, position)
    acknowledged = set(acknowledged)
    result.acknowledged = len(acknowledged)
    result.delivered = len(first_delivery)
    result.lost = sorted(acknowledged - first_delivery.keys())
    result.order_violations = order_violations(first_delivery, stream_of)
    return result
