"""What a FWD or RETRY puts: target, mode, headers — computed from the dead letter, no I/O.

The put keeps all of the original context: body byte for byte, class, type, priority,
correlation id, and (passed to the server in `pass_context`) the original sender and
put time. A recoverable original goes WF_DQF (acknowledged once it is on disk),
under an idempotency key made from the dead letter and the target, so a handler
killed after the put and before the DLQ confirm re-puts it as a duplicate the
server recognises instead of a second copy; a nonrecoverable original goes WF_MEM
and, when the handler got it as POSSDUPL, is marked a possible duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass

from mrs.dlq.table import Action, Rule
from mrs.group.dlq_leases import CONTEXT_HEADER, POSSIBLE_DUPLICATE_HEADER
from mrs.group.records import DEAD_LETTER_HEADER, IDEMPOTENCY_HEADER
from mrs.model import DeliveryMode, Message, Status, Uma


class NoTarget(Exception):
    """The rule's variables name nothing for this message (e.g. no reply queue)."""


@dataclass(frozen=True, slots=True)
class PutPlan:
    target: str
    """As the bus config resolves it: "Q" (this group), "QM.Q", numbers or names."""
    delivery: DeliveryMode
    headers: dict


def target_text(rule: Rule, message: Message) -> str:
    """The queue a FWD or RETRY puts to, with &DESTQ/&DESTQM/&REPLYQ/&REPLYQM filled."""
    header = message.dead_letter_header or {}
    if rule.action is Action.RETRY:
        return _join(header.get("dest_q_mgr_name"), header.get("dest_q_name"))
    reply = (message.headers or {}).get("reply_q") or str(message.source)
    reply_group, _, reply_queue = str(reply).rpartition(".")
    variables = {
        "&DESTQ": header.get("dest_q_name"),
        "&DESTQM": header.get("dest_q_mgr_name"),
        "&REPLYQ": reply_queue,
        "&REPLYQM": reply_group,
    }
    queue = variables.get(rule.fwd_q, rule.fwd_q)
    manager = variables.get(rule.fwd_qm, rule.fwd_qm) if rule.fwd_qm else None
    if not queue or not str(queue).strip():
        raise NoTarget(f"FWDQ({rule.fwd_q}) names no queue for this message")
    return _join(manager, queue)


def _join(manager: object, queue: object) -> str:
    if queue is None or not str(queue).strip():
        raise NoTarget("the dead-letter header names no destination queue")
    manager_text = str(manager).strip() if manager is not None else ""
    return f"{manager_text}.{str(queue).strip()}" if manager_text else str(queue).strip()


def plan_put(rule: Rule, message: Message, group_id: int, target: str) -> PutPlan:
    recoverable = message.delivery.recoverable
    headers = {
        key: value
        for key, value in (message.headers or {}).items()
        if key not in (DEAD_LETTER_HEADER, IDEMPOTENCY_HEADER, POSSIBLE_DUPLICATE_HEADER)
    }
    headers[CONTEXT_HEADER] = {
        "source": str(message.source),
        "put_time_ns": message.put_time_ns,
        "dlq_seq": message.seq,
    }
    if rule.action is Action.FWD and rule.header and message.dead_letter_header:
        headers[DEAD_LETTER_HEADER] = dict(message.dead_letter_header)
    if recoverable:
        header = message.dead_letter_header or {}
        stamp = f"{header.get('put_date', '')}{header.get('put_time', '')}"
        headers[IDEMPOTENCY_HEADER] = f"dlq:{group_id}:{message.seq}:{stamp}:{target}"
    if message.delivery_status == Status.POSSDUPL:
        headers[POSSIBLE_DUPLICATE_HEADER] = True
    delivery = DeliveryMode.WF_DQF if recoverable else DeliveryMode.WF_MEM
    return PutPlan(target, delivery, headers)


def uma_for(delivery: DeliveryMode, remote: bool) -> Uma:
    """SAF keeps a recoverable forward to an unreachable group durable on this side;
    otherwise a refused put is simply not stored (the dead letter stays)."""
    return Uma.SAF if delivery.recoverable and remote else Uma.DISC
