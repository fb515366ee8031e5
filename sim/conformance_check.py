"""MessageQ conformance over a recorded history: the UMAs taken and the MRS_ACKs.

- wrong UMAs: a failed put answered with another UMA's status than its sender chose,
  or a WF put answered SAF_FORCED with no SAF backlog that may be ahead of it and no
  fault near the put (after one DQF_FULL, the next puts must take their own UMA);
- MRS_ACK violations: every requested MRS_ACK arrives exactly once: an AK put
  acknowledged twice, or never although its message reached its interest point (and
  no crash excuses it), or with a status its mode cannot report.
"""

from __future__ import annotations

from mrs.core.delivery import UMA_FAILURE, UMA_SUCCESS
from mrs.model import DeliveryMode, InterestPoint, Notification, Status, Uma
from sim.history import History, Sent, status_name, with_mrs_ack


def wrong_umas(history: History) -> list[str]:
    """Each put that could not reach its interest point takes the UMA its sender chose;
    SAF_FORCED only behind a SAF backlog for that group (or when a fault caught the
    put in flight), never instead of the UMA."""
    problems = []
    sends = [with_mrs_ack(history, sent) for sent in history.sent.values()]  # put order
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
                    f"{sent.message_id}: {status_name(status)} with UMA {action.name} "
                    f"answered {status_name(sent.uma_status)}"
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
    (benchmarks/README.md): an AK put answered with a seq whose message reached its interest point
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
        return f"{mode.name}'s MRS_ACK says {status_name(delivery_status)}"
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
