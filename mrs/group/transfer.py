"""The link's status words: which refusals of a transferred message are permanent, what a
message in flight gets when its link drops, a SAF record read for a transfer, the answer
for one message or notice.

Why apart: the outbound room, the drain, the inbound room and the link session all
count on these; none of them should import another for it. The transferred message
itself and its conversions to and from an entry are in mrs.group.shapes.
"""

from __future__ import annotations

from journals import CorruptRecord, Record, decode_record
from mrs.model import Status
from mrs.protocol.link_events import LinkResult
from mrs.protocol.post_init import build_unchecked_all

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


Answer = tuple[int, int, int]
"""The answer for one message or notice a peer sent: (its seq, a Status, the seq it is
stored under), as a LinkResult holds it."""


def link_results(answers: list[Answer]) -> list[LinkResult]:
    """The LinkResults of a frame's answers, built without the generic check of their
    fields (`build_unchecked_all`): each seq comes from the peer's decoded frame or
    this group's journal and each status from `Status`, so only the seqs' sign is
    asserted. Why: a drained message is answered twice (its transfer, then its forget
    notice), and the checked build, with the thread-local decode state set per item,
    was about 7% of the receiver's instructions per message (benchmarks/README.md)."""
    for seq, _status, stored_seq in answers:
        assert seq >= 0 and stored_seq >= 0, f"a link answer with a negative seq: {answers}"
    return build_unchecked_all(LinkResult, answers)
