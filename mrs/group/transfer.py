"""A message as it travels between groups (transfer fields), and the link's status words.

Why apart: the outbound room writes this shape, the drain reads SAF records into
it, the inbound room decodes it, and the link session counts on its result codes;
none of them should import another for it.
"""

from __future__ import annotations

from journals import CorruptRecord, Record, decode_record
from mrs.errors import ProtocolError
from mrs.model import Address, DeliveryMode, Status
from mrs.quarantine import PoisonTransfer, transfer_problem
from mrs.queues import Entry

TRANSFER_FIELDS = (
    "seq", "target_queue", "source_group", "source_queue", "body", "msg_class", "msg_type",
    "priority", "delivery", "uma", "correlation_id", "put_time_ns", "headers", "ordered",
)  # fmt: skip
PERMANENT_REFUSALS = frozenset(
    {Status.NO_DQF, Status.NOSUCHQUEUE, Status.MSGTOOBIG, Status.BADPARAM, Status.KEY_REUSED}
)
"""Refusals that no retry will cure: the channel rules send these to the DLQ."""
RECEIVER_DEAD_LETTERED = frozenset({Status.NO_DQF, Status.NOSUCHQUEUE})
"""A SAF-drained message the receiving group refuses for these goes to the receiving
group's DLQ ("receiver channels place undelivered messages to the local DLQ") and is
answered DLQ_SUCCESS; the sender's own refusals (too big for the link, poison) and a
failed receiver DLQ put stay with the sender's channel rules."""
LINK_LOST = -1
"""Result given to a message in flight when its link drops before the answer."""


class TransferError(ProtocolError, ValueError):
    """A peer sent a transfer that does not decode: the link is broken."""


def transfer_fields(entry: Entry, ordered: bool = False) -> list:
    """An entry as sent over a link; `ordered` for the SAF drain (see accept_transfer)."""
    return [
        entry.seq,
        entry.target.queue,
        entry.source.group,
        entry.source.queue,
        entry.body,
        entry.msg_class,
        entry.msg_type,
        entry.priority,
        int(entry.delivery),
        int(entry.uma),
        entry.correlation_id,
        entry.put_time_ns,
        entry.headers,
        ordered,
    ]


def entry_from_fields(group_id: int, peer_id: int, fields: object) -> tuple[Entry, bool]:
    """The entry (and its `ordered` flag) for a message group `peer_id` sent to group
    `group_id`. PoisonTransfer: a client could not have put it (refused alone);
    TransferError: no usable seq, the link is broken."""
    if not isinstance(fields, list) or len(fields) != len(TRANSFER_FIELDS):
        raise TransferError(
            f"a transferred message must be a list of {len(TRANSFER_FIELDS)} fields"
        )
    values = dict(zip(TRANSFER_FIELDS, fields, strict=True))
    if type(values["seq"]) is not int or not 0 <= values["seq"] < 1 << 64:
        raise TransferError("bad transferred message: seq must be an int in 0..2**64-1")
    if (problem := transfer_problem(values)) is not None:
        raise PoisonTransfer(values["seq"], problem)
    try:
        mode = DeliveryMode(values["delivery"])
        entry = Entry(
            seq=values["seq"],
            body=values["body"],
            source=Address(values["source_group"], values["source_queue"]),
            target=Address(group_id, values["target_queue"]),
            delivery=mode,
            uma=values["uma"],
            msg_class=values["msg_class"],
            msg_type=values["msg_type"],
            priority=values["priority"],
            correlation_id=values["correlation_id"],
            put_time_ns=values["put_time_ns"],
            headers=values["headers"],
            dead_letter_header=(values["headers"] or {}).get("dead_letter_header"),
            origin_group=peer_id if mode.recoverable else None,
        )
    except (ValueError, TypeError) as error:
        raise TransferError(f"bad transferred message: {error}") from None
    if not isinstance(entry.body, bytes) or not isinstance(entry.seq, int):
        raise TransferError("bad transferred message: body must be bytes, seq an int")
    return entry, values["ordered"] is True


def decode_saf(value: bytes | None, key: bytes) -> Record:
    if value is None:
        raise CorruptRecord("saf", key, "record vanished")
    return decode_record(value, "saf", key)


def status_name(status: int) -> str:
    if status == LINK_LOST:
        return "LINK_LOST"
    try:
        return Status(status).name
    except ValueError:
        return str(status)


def link_result(result: object) -> tuple[int, int, int]:
    """One LinkAck result as (seq, status, stored_seq), or TransferError."""
    if (
        not isinstance(result, list)
        or len(result) != 3
        or not all(isinstance(value, int) for value in result)
    ):
        raise TransferError(f"a LinkAck result must be [seq, status, stored_seq], got {result!r}")
    return result[0], result[1], result[2]
