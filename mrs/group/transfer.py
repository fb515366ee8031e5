"""A message as it travels between groups (a typed TransferredMessage), and the link's
status words.

Why apart: the outbound room writes this shape, the drain reads SAF records into
it, the inbound room decodes it, and the link session counts on its result codes;
none of them should import another for it.
"""

from __future__ import annotations

from msgspec.structs import asdict

from journals import CorruptRecord, Record, decode_record
from mrs.errors import ProtocolError
from mrs.group.quarantine import PoisonTransfer, transfer_problem
from mrs.group.queues import Entry
from mrs.model import Address, DeliveryMode, Status
from mrs.protocol.link_events import TRANSFER_FIELDS as TRANSFER_FIELDS  # re-exported
from mrs.protocol.link_events import TransferredMessage

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


def transfer_fields(entry: Entry, ordered: bool = False) -> TransferredMessage:
    """An entry as sent over a link; `ordered` for the SAF drain (see accept_transfer).
    A message leaves with its body: SAF records and direct puts hold it in memory."""
    body = entry.body
    assert body is not None, f"message {entry.seq} left for another group without its body"
    return TransferredMessage(
        entry.seq,
        entry.target.queue,
        entry.source.group,
        entry.source.queue,
        body,
        entry.msg_class,
        entry.msg_type,
        entry.priority,
        int(entry.delivery),
        int(entry.uma),
        entry.correlation_id,
        entry.put_time_ns,
        entry.headers,
        ordered,
    )


def entry_from_fields(
    group_id: int, peer_id: int, message: TransferredMessage
) -> tuple[Entry, bool]:
    """The entry (and its `ordered` flag) for a message group `peer_id` sent to group
    `group_id`. Its shape was checked when its frame was decoded; PoisonTransfer: a
    client could not have put it (refused alone); TransferError: it still does not
    make an entry, the link is broken."""
    if (problem := transfer_problem(asdict(message))) is not None:
        raise PoisonTransfer(message.seq, problem)
    try:
        mode = DeliveryMode(message.delivery)
        headers = message.headers
        entry = Entry(
            seq=message.seq,
            body=message.body,
            source=Address(message.source_group, message.source_queue),
            target=Address(group_id, message.target_queue),
            delivery=mode,
            uma=message.uma,
            msg_class=message.msg_class,
            msg_type=message.msg_type,
            priority=message.priority,
            correlation_id=message.correlation_id,
            put_time_ns=message.put_time_ns,
            headers=headers,
            dead_letter_header=(headers or {}).get("dead_letter_header"),
            origin_group=peer_id if mode.recoverable else None,
        )
    except (ValueError, TypeError) as error:
        raise TransferError(f"bad transferred message: {error}") from None
    return entry, message.ordered


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
