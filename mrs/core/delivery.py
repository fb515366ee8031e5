"""The rules of delivery: which mode/UMA pairs exist, what status each outcome reports,
how confirmation order is enforced. Pure functions, no I/O, so they are tested
exhaustively on their own and the server just asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mrs.errors import Refused
from mrs.model import (
    UMA_FAILURE,
    UMA_SUCCESS,
    ConfirmStyle,
    DeliveryMode,
    ForceJrn,
    InterestPoint,
    Notification,
    Status,
    Uma,
)

# Members read per message, looked up once: in compiled code `Status.STORED` is a
# generic class attribute lookup each time, ~45 ns against a static's ~1 (benchmarks/README.md).
# The public ones are what the rooms read per message too: this module is compiled,
# so a compiled importer reads each as this module's C static (docs/native.md).
SUCCESS: Final = Status.SUCCESS
STORED: Final = Status.STORED
NO_UMA: Final = Status.NO_UMA
CONFIRMREQ: Final = Status.CONFIRMREQ
POSSDUPL: Final = Status.POSSDUPL
SUCCESS_INT: Final = int(Status.SUCCESS)
"""Statuses as plain ints for the events built unchecked: an IntEnum member fails the
wire check's exact-int fast path."""
STORED_INT: Final = int(Status.STORED)
NO_UMA_INT: Final = int(Status.NO_UMA)
UMA_NA_INT: Final = int(Status.UMA_NA)
AK: Final = Notification.AK
WF: Final = Notification.WF
CONF_POINT: Final = InterestPoint.CONF
_SAF_POINT: Final = InterestPoint.SAF
_DQF_POINT: Final = InterestPoint.DQF
_MEM_POINT: Final = InterestPoint.MEM
_IN_ORDER: Final = ConfirmStyle.EXPLICIT_IN_ORDER
EMPTY_GET_TEXT: Final = "no message on"
"""How every answer to a get that found no message begins (TIMEOUT, NOMOREMSG, a
cancelled get): the metrics count those as an idle consumer, not as a failure."""


def check_mode_and_uma(delivery: int, uma: int) -> tuple[DeliveryMode, Uma]:
    """Validate a put's delivery mode and UMA (0 = not given); return them as enums.

    Values that are no mode/UMA at all answer BADDELIVERY/BADUMA; real values that
    MessageQ does not combine answer NOTSUPPORTED.
    """
    found = _VALID_PAIRS.get((delivery, uma))
    if found is not None:  # every put takes this path: one dict lookup
        return found
    try:
        mode = DeliveryMode(delivery)
    except ValueError:
        raise Refused(Status.BADDELIVERY, f"{delivery} is not a delivery mode") from None
    if uma == 0:
        if mode.recoverable:
            raise Refused(
                Status.BADUMA,
                f"{mode.name} is recoverable: a UMA must be given "
                "(DISC, DISCL, RTS, DLQ, DLJ, SAF)",
            )
        return mode, Uma.DISC
    try:
        action = Uma(uma)
    except ValueError:
        raise Refused(Status.BADUMA, f"{uma} is not a UMA") from None
    if not supported(mode, action):
        raise Refused(Status.NOTSUPPORTED, f"UMA {action.name} is not supported with {mode.name}")
    return mode, action


def supported(mode: DeliveryMode, action: Uma) -> bool:
    """DLJ and SAF only for recoverable modes; SAF not when SAF is the interest point."""
    if action in (Uma.DLJ, Uma.SAF) and not mode.recoverable:
        return False
    return not (action is Uma.SAF and mode.interest_point is InterestPoint.SAF)


_VALID_PAIRS: Final[dict[tuple[int, int], tuple[DeliveryMode, Uma]]] = {
    (int(mode), int(action)): (mode, action)
    for mode in DeliveryMode
    for action in Uma
    if supported(mode, action)
}
_VALID_PAIRS.update(
    {(int(mode), 0): (mode, Uma.DISC) for mode in DeliveryMode if not mode.recoverable}
)
"""Every accepted (delivery, uma) pair as the enums check_mode_and_uma returns,
computed once from `supported` (an Enum constructor per put showed in profiles)."""


def supported_pair(delivery: int, uma: int) -> bool:
    """Whether `check_mode_and_uma(delivery, uma)` accepts the pair (of plain ints),
    without raising: the receiving group's quick check of a transferred message
    (mrs.group.shapes.transfer_sound)."""
    return (delivery, uma) in _VALID_PAIRS


def reached_status(mode: DeliveryMode, target_attached: bool) -> Status:
    """The delivery status reported when a message reaches its interest point."""
    point = mode.interest_point
    if point is _SAF_POINT or point is _DQF_POINT:
        return STORED
    if point is _MEM_POINT:
        return Status.ENQUEUED if target_attached else Status.UNATTACHEDQ
    return SUCCESS  # DEQ, ACK, CONF: the receiver has it


def uma_status(action: Uma, succeeded: bool) -> Status:
    return UMA_SUCCESS[action] if succeeded else UMA_FAILURE[action]


def delivery_status_on_get(recoverable_or_ack: bool, times_delivered_before: int) -> Status:
    """CONFIRMREQ on first delivery of a message that needs a confirm, POSSDUPL later."""
    if not recoverable_or_ack:
        return SUCCESS
    return CONFIRMREQ if times_delivered_before == 0 else POSSDUPL


def check_confirm(style: ConfirmStyle, unconfirmed: Mapping[int, object], seq: int) -> None:
    """Raise Refused(BADSEQ) unless `seq` may be confirmed now.

    `unconfirmed` maps the delivered, unconfirmed seqs of the queue in delivery
    order (oldest first). An in-order queue only accepts the oldest one.
    """
    if seq not in unconfirmed:
        raise Refused(
            Status.BADSEQ,
            f"sequence number {seq} is not awaiting a confirm here (confirmed already, "
            f"a message that needs no confirm, or delivered before a reconnect: that "
            f"message comes again, POSSDUPL)",
        )
    if style is _IN_ORDER:
        oldest = next(iter(unconfirmed))
        if seq != oldest:
            raise Refused(Status.BADSEQ, f"queue confirms in order: confirm {oldest} before {seq}")


_PCJ_CHOICE: dict[int, bool | None] = {
    ForceJrn.DEFAULT_JRN: None,
    ForceJrn.FORCE_JRN: True,
    ForceJrn.NO_JRN: False,
}
"""force_j -> whether the confirm writes the PCJ (None: as pcj_default says); a dict
lookup, not an enum construction, since every confirm asks."""


def journal_on_confirm(force_j: int, pcj_default: bool) -> bool:
    """Whether a confirm writes the message to the PCJ."""
    try:
        choice = _PCJ_CHOICE.get(force_j, ...)
    except TypeError:  # unhashable: not a force_j either
        choice = ...
    if choice is ...:
        raise Refused(Status.BADPARAM, f"force_j {force_j} is not DEFAULT_JRN, FORCE_JRN or NO_JRN")
    return pcj_default if choice is None else choice
