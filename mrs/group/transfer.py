"""The link's status words: which refusals of a transferred message are permanent, what a
message in flight gets when its link drops, a SAF record read for a transfer.

Why apart: the outbound room, the drain, the inbound room and the link session all
count on these; none of them should import another for it. The transferred message
itself and its conversions to and from an entry are in mrs.group.shapes.
"""

from __future__ import annotations

from journals import CorruptRecord, Record, decode_record
from mrs.model import Status

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
