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

from mrs.address import id_number
from mrs.config.schema import NAME_CHARS_MAX
from mrs.dlq.parser import shown
from mrs.dlq.table import FWDQ_VARIABLES, FWDQM_VARIABLES, Action, Rule, RulesTable
from mrs.group.dlq_leases import CONTEXT_HEADER
from mrs.group.shapes import DEAD_LETTER_HEADER, IDEMPOTENCY_HEADER
from mrs.model import (
    DEAD_LETTER_QUEUE,
    POSSIBLE_DUPLICATE_HEADER,
    REPLY_QUEUE_HEADER,
    Address,
    DeliveryMode,
    Message,
    Status,
    Uma,
)

RETURNS_HEADER = "dlq_returns"
"""How many times a DLQ handler has put this message back out of a DLQ; a message
that keeps coming back (a rule or a destination that dead-letters it again) is
stopped at `mrs.limits.DLQ_HANDLER_RETURNS_MAX` instead of looping for ever."""


def returns_of(headers: dict | None) -> int:
    """The message's count of puts out of a DLQ (0 when absent or not a count)."""
    value = (headers or {}).get(RETURNS_HEADER)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


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
    reply = (message.headers or {}).get(REPLY_QUEUE_HEADER) or str(message.source)
    reply_group, _, reply_queue = str(reply).rpartition(".")
    reply_group = reply_group or str(message.source.group)  # MQ: blank = the putter's
    variables: dict[str | None, object] = {
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


def plan_put(
    rule: Rule, message: Message, group_id: int, target: str, repeat: bool = False
) -> PutPlan:
    """What to put. `repeat`: an earlier put of this letter may have been stored (it
    timed out), so this one is marked a possible duplicate, as a lease that came back
    POSSDUPL is."""
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
    if repeat or message.delivery_status == Status.POSSDUPL:
        headers[POSSIBLE_DUPLICATE_HEADER] = True
    headers[RETURNS_HEADER] = returns_of(message.headers) + 1
    delivery = DeliveryMode.WF_DQF if recoverable else DeliveryMode.WF_MEM
    return PutPlan(target, delivery, headers)


def headerless_into_own_dlq(plan: PutPlan, address: Address, group_id: int) -> str | None:
    """Why a put would land on the very DLQ the handler reads without its dead-letter
    header (a RETRY whose original destination is that DLQ, a FWD HEADER(NO) whose
    &DESTQ/&REPLYQ names it), or None. Such a put is not made: the letter would come
    back as a message without a header, never matched again, its reason lost."""
    if address != Address(group_id, DEAD_LETTER_QUEUE) or DEAD_LETTER_HEADER in plan.headers:
        return None
    return (
        f"{address} is the dead-letter queue this handler reads: the message would "
        "come back to it without its dead-letter header; not put"
    )


def uma_for(delivery: DeliveryMode, remote: bool) -> Uma:
    """SAF keeps a recoverable forward to an unreachable group durable on this side;
    otherwise a refused put is simply not stored (the dead letter stays)."""
    return Uma.SAF if delivery.recoverable and remote else Uma.DISC


def target_problems(table: RulesTable, bus, group_id: int) -> list[str]:
    """ "line L, column C: why" for each FWD whose FWDQ/FWDQM name no queue of the bus,
    or name the DLQ the handler reads (a loop), found when the table is loaded rather
    than as a failed attempt per message. Variables are filled per message: skipped."""
    problems = []
    for rule in table.rules:
        if rule.action is not Action.FWD:
            continue
        manager = (rule.fwd_qm or "").strip()
        queue = (rule.fwd_q or "").strip()
        named = f"FWDQ({shown(queue)})" + (f" FWDQM({shown(manager)})" if manager else "")
        if rule.fwd_q in FWDQ_VARIABLES or rule.fwd_qm in FWDQM_VARIABLES:
            if (why := _fixed_half_problem(rule, bus)) is not None:
                line, column = rule.fwd_place
                problems.append(f"line {line}, column {column}: {named} {why}")
            continue
        why = _target_problem(f"{manager}.{queue}" if manager else queue, bus, group_id)
        if why is not None and max(len(queue), len(manager)) > NAME_CHARS_MAX:
            # the address's own error quotes it whole, twice: one line, not 2 MiB
            why = f"names no queue of the bus: a name has at most {NAME_CHARS_MAX} characters"
        if why is None and not table.reads_dead_letter_journal:
            address = bus.resolve(f"{manager}.{queue}" if manager else queue, group_id)
            if address == Address(group_id, DEAD_LETTER_QUEUE):
                why = (
                    "is the dead-letter queue this handler reads: every message it "
                    "forwards would come back to it (a loop)"
                )
        if why is not None and "." in f"{queue}{manager}":
            why += _DOTTED_NAME_HINT
        if why is not None:
            line, column = rule.fwd_place
            problems.append(f"line {line}, column {column}: {named} {why}")
    return problems


_DOTTED_NAME_HINT = (
    " ('.' separates GROUP.QUEUE in MRS, and a queue or group name has none: an MQ "
    "name such as REALLY.DEAD.QUEUE is written as the bus config names the queue, "
    "e.g. REALLY_DEAD_QUEUE)"
)
"""An MQ administrator's FWDQ(REALLY.DEAD.QUEUE) read as group REALLY.DEAD, queue
QUEUE: the error alone ("no group named 'REALLY'") did not say why."""


def _fixed_half_problem(rule: Rule, bus) -> str | None:
    """Why the half of FWDQ/FWDQM without a variable names nothing on the bus, or None.
    Why: only a FWD whose FWDQ and FWDQM were both fixed was checked, so `--check`
    called `FWDQ(&DESTQ) FWDQM(BBBB)` valid (a group the bus does not have, MQ's
    sample table forwards so), and the handler then failed every letter the rule
    took, one attempt each, and left them all on the DLQ. Blank FWDQM: this group."""
    manager = (rule.fwd_qm or "").strip()
    queue = (rule.fwd_q or "").strip()
    if rule.fwd_q in FWDQ_VARIABLES:
        if not manager or rule.fwd_qm in FWDQM_VARIABLES:
            return None
        if len(manager) > NAME_CHARS_MAX:
            return f"names no group of the bus: a name has at most {NAME_CHARS_MAX} characters"
        try:
            if id_number(manager):  # not "²", which int() refuses
                bus.group(int(manager))
            else:
                bus.group_by_name(manager)
        except LookupError as error:
            hint = _DOTTED_NAME_HINT if "." in manager else ""
            return f"names no group of the bus: {error}{hint}"
        return None
    if len(queue) > NAME_CHARS_MAX:
        return f"names no queue of the bus: a name has at most {NAME_CHARS_MAX} characters"
    if "." not in queue:
        for group in bus.groups.values():
            if _target_problem(f"{group.id}.{queue}", bus, group.id) is None:
                return None
    hint = _DOTTED_NAME_HINT if "." in queue else ""
    return f"names no queue of any group of the bus (FWDQM names the group){hint}"


def _target_problem(target: str, bus, group_id: int) -> str | None:
    try:
        address = bus.resolve(target, group_id)
    except (LookupError, ValueError) as error:
        return f"names no queue of the bus: {error}"
    group = bus.groups.get(address.group)
    if group is None:
        return f"names group {address.group}, which the bus does not have"
    if address.queue not in group.queues:
        return f"names queue {address}, which group {address.group} does not have"
    return None
