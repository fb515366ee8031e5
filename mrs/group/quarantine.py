"""Poison messages: found before they can hurt, set aside in the DLJ, never fatal.

Why: a message with one out-of-range field (priority 200, a delivery mode that does
not exist, a queue number past 32 bits) used to be journaled as it came over a link,
then raised while building the reply to a get, inside the commit loop: the process
died, recovery reloaded it, and the next get killed it again. So

- everything a peer transfers is checked exactly as a client's put is (the same wire
  checks, the same mode/UMA rules, the same header and key rules); a message failing
  them is refused with BADPARAM, a permanent refusal the sender's channel rules
  dead-letter (`transfer_problem`);
- a message that still cannot be delivered (a tampered journal record with a valid
  checksum, a dead-letter copy of one) is quarantined at delivery: moved, in one
  transaction, from the DQF to the DLJ with reason BADPARAM and the problem in
  `extra["quarantine"]`, logged, and the get is served the next message.
"""

from __future__ import annotations

from journals import Journal, Record, WriteBatch, seq_key
from mrs import protocol as wire
from mrs.core.deadletter import header_problem
from mrs.core.delivery import Refused, check_mode_and_uma
from mrs.group.shapes import (
    DEAD_LETTER_HEADER,
    U32_MAX,
    extra_sound,
    idempotency_key,
    record_sound,
)
from mrs.model import Status, delivery_mode_of

QUARANTINE_EXTRA = "quarantine"
"""Key in a DLJ record's `extra` holding why the message was quarantined."""
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class PoisonTransfer(Exception):
    """A transferred message that a client could not have put: refused, not stored."""

    def __init__(self, seq: int, problem: str) -> None:
        super().__init__(problem)
        self.seq = seq
        self.problem = problem


def transfer_problem(values: dict) -> str | None:
    """Why a message a peer transferred (field name -> value) would be refused from a
    client, or None. The seq must already be known to be an int."""
    for name in ("target_queue", "source_group", "source_queue"):
        value = values[name]
        if type(value) is not int or not 0 <= value <= U32_MAX:
            return f"{name} must be an int in 0..{U32_MAX}, got {value!r:.60}"
    put_time_ns = values["put_time_ns"]
    if type(put_time_ns) is not int or not INT64_MIN <= put_time_ns <= INT64_MAX:
        return f"put_time_ns must be an int64, got {put_time_ns!r:.60}"
    try:
        # The very checks a client's Put frame passes (types, ranges, header data).
        wire.Put(
            1,
            "0.0",
            values["body"],
            values["delivery"],
            values["uma"],
            values["msg_class"],
            values["msg_type"],
            values["priority"],
            0,
            values["correlation_id"],
            "",
            values["headers"],
        )
        check_mode_and_uma(values["delivery"], values["uma"])
        idempotency_key(values["headers"])
    except wire.ProtocolError as error:
        return str(error).replace("Put.", "", 1)
    except Refused as refused:
        return refused.message
    header = (values["headers"] or {}).get(DEAD_LETTER_HEADER)
    if header is not None:
        return header_problem(header)
    return None


def record_problem(record: Record) -> str | None:
    """Why a journal record cannot become a queue entry (e.g. a delivery mode that does
    not exist, written by a tampered or foreign journal), or None.

    Every message read back from a cold backlog is asked (benchmarks/README.md): a sound record
    is answered by one compiled expression (`mrs.group.shapes.record_sound`); only a
    record that fails it goes through the checks that word the problem."""
    if record_sound(record):
        return None
    return _worded_record_problem(record)


def _worded_record_problem(record: object) -> str | None:
    try:
        delivery_mode_of(record.delivery)
    except (ValueError, TypeError):
        return f"delivery {record.delivery!r:.60} is not a delivery mode"
    for name in ("target_queue", "source_group", "source_queue"):
        value = getattr(record, name)
        if type(value) is not int or not 0 <= value <= U32_MAX:
            return f"{name} must be an int in 0..{U32_MAX}, got {value!r:.60}"
    extra = record.extra
    if extra and not extra_sound(extra):
        resp_q, headers = extra.get("resp_q"), extra.get("headers")
        if headers is not None and type(headers) is not dict:
            return f"headers {headers!r:.60} is not a map"
        return f"resp_q {resp_q!r:.60} is not a queue address"
    return None


def quarantine_batch(record, problem: str) -> WriteBatch:
    """A batch putting `record` in the DLJ with reason BADPARAM and its problem."""
    record.reason = int(Status.BADPARAM)
    record.extra = {**(record.extra or {}), QUARANTINE_EXTRA: problem}
    return WriteBatch.empty().put_record(Journal.DLJ, seq_key(record.seq), record)
