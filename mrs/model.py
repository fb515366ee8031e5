"""The vocabulary of MRS: MessageQ's constants, the PSB, messages and addresses.

Every number here comes from `shared/reference/messageq-constants.md` so that people
who know MessageQ recognise them. Nothing else in the code base spells a status or
mode as a bare number.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import msgpack
import msgspec

from mrs.address import Address as Address  # re-exported: compiled (mrs.address)
from mrs.limits import PUT_TIMEOUT_S_DEFAULT as DEFAULT_PUT_TIMEOUT_S  # noqa: F401 (old name)

DEAD_LETTER_QUEUE = 96
"""Queue 96 of every group is the dead letter queue (PAMS_DEAD_LETTER_QUEUE)."""
POSSIBLE_DUPLICATE_HEADER = "possible_duplicate"
"""Set on a copy that may have been put once before (a DLQ handler re-forwarding a
dead letter it got POSSDUPL, a reader dead-lettering a refused protected message it
got POSSDUPL): the group hands it to its receiver as POSSDUPL too."""

MRS_CLASS = 28
"""Message class of the messages the MRS itself sends."""

MRS_ACK_TYPE = -801
"""Message type of an MRS_ACK (carries the PSB of an AK-mode put)."""

MRS_ACK_SOURCE_QUEUE = 0
"""The queue an MRS_ACK comes from: the group's own (G.0), which no application is
attached to (`Message.is_mrs_ack`)."""


class NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints as its name (`Status.STORED`, not `31`) in logs, errors
    and f-strings; the wire, the journals and JSON still carry the number (int(x),
    format(x, "d"))."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int(self).__format__(spec)


class Notification(enum.StrEnum):
    """How the sender learns the outcome of a put: the first half of a mode's name."""

    WF = "WF"
    """Wait for: the put blocks until the interest point is reached (or times out)."""
    AK = "AK"
    """Acknowledge: the put returns at once; an MRS_ACK message follows."""
    NN = "NN"
    """No notification."""


class InterestPoint(enum.StrEnum):
    """Where a put counts as delivered: the second half of a mode's name.

    A StrEnum, so `point == "CONF"` still holds, but code compares members
    (`point is InterestPoint.CONF`)."""

    SAF = "SAF"
    DQF = "DQF"
    MEM = "MEM"
    DEQ = "DEQ"
    CONF = "CONF"
    ACK = "ACK"


RECOVERABLE_POINTS = frozenset({InterestPoint.SAF, InterestPoint.DQF, InterestPoint.CONF})
"""Interest points reached through a journal (SAF or DQF): the recoverable modes."""


class DeliveryMode(NamedIntEnum):
    """PDEL_MODE_*: sender notification (WF/AK/NN) x delivery interest point.

    Each member carries its properties as plain attributes, computed once below from
    the member's name (`notification`, `interest_point`, `recoverable`,
    `waits_for_receiver`): the put path reads them per message, and slicing the enum
    name there cost about 11% of a put's CPU in a profile.
    """

    notification: Notification
    """WF (block), AK (MRS_ACK message later) or NN (nothing)."""
    interest_point: InterestPoint
    """SAF, DQF, CONF, MEM, DEQ or ACK."""
    recoverable: bool
    """True for the journaled modes (interest point SAF, DQF or CONF)."""
    waits_for_receiver: bool
    """True when the interest point is reached only by the receiving application
    (CONF, DEQ, ACK), not by a store."""

    WF_SAF = 25
    WF_DQF = 26
    WF_MEM = 29
    AK_SAF = 30
    AK_DQF = 31
    AK_MEM = 34
    NN_SAF = 35
    NN_DQF = 36
    NN_MEM = 39
    WF_DEQ = 40
    AK_DEQ = 41
    WF_CONF = 42
    AK_CONF = 43
    WF_ACK = 44
    AK_ACK = 45


def _precompute_mode_tables() -> None:
    """Give every DeliveryMode member its properties once, at import."""
    for mode in DeliveryMode:
        notification, _, point = mode.name.partition("_")
        interest_point = InterestPoint(point)
        mode.notification = Notification(notification)
        mode.interest_point = interest_point
        mode.recoverable = interest_point in RECOVERABLE_POINTS
        mode.waits_for_receiver = interest_point in (
            InterestPoint.CONF,
            InterestPoint.DEQ,
            InterestPoint.ACK,
        )


_precompute_mode_tables()

RECOVERABLE_MODES = frozenset(mode for mode in DeliveryMode if mode.recoverable)
"""The modes whose messages are journaled (SAF, DQF, CONF interest points)."""


class Uma(NamedIntEnum):
    """PDEL_UMA_*: what happens to a message that cannot reach its interest point."""

    RTS = 1
    DLJ = 2
    DLQ = 3
    SAF = 4
    DISC = 5
    DISCL = 6


class ForceJrn(NamedIntEnum):
    """PDEL_*_JRN: whether a confirm writes the message to the PCJ."""

    DEFAULT_JRN = 0
    FORCE_JRN = 1
    NO_JRN = 2


class ConfirmStyle(enum.StrEnum):
    """How a queue's recoverable messages are confirmed."""

    IMPLICIT = "implicit"
    EXPLICIT_IN_ORDER = "explicit-in-order"
    EXPLICIT_OUT_OF_ORDER = "explicit-out-of-order"


class Status(NamedIntEnum):
    """PAMS__* status values (UNIX numbering). Odd positive = success/information.

    The first block is MessageQ's own table. DQF_DEVICE_FAIL and the *_FAILED UMA
    statuses have no published number; the values chosen do not collide. The last
    block are MRS's own statuses for conditions MessageQ reports less precisely.
    """

    # success / information
    SUCCESS = 1
    LINK_UP = 3
    JOURNAL_ON = 5
    NOMOREMSG = 7
    DISC_SUCCESS = 11
    DISCL_SUCCESS = 13
    DLJ_SUCCESS = 15
    DLQ_SUCCESS = 17
    RTS_SUCCESS = 19
    SAF_SUCCESS = 21
    NO_UMA = 25
    UMA_NA = 27
    STORED = 31
    ENQUEUED = 33
    UNATTACHEDQ = 35
    CONFIRMREQ = 37
    SAF_FORCED = 43
    # failure
    TIMEOUT = -14
    ACKTMO = -16
    MSGUNDEL = -18
    NOTACTIVE = -54
    EXCEEDQUOTA = -56
    BADDELIVERY = -60
    POSSDUPL = -158
    EXCMAXUNCONF = -170
    NOMRS = -188
    DQF_DEVICE_FAIL = -200
    DQF_FULL = -202
    LINK_DOWN = -206
    BADSEQ = -208
    NOTJRN = -210
    MRS_RES_EXH = -212
    NOSUCHPCJ = -218
    BADUMA = -222
    NO_DQF = -228
    NO_SAF = -230
    SAF_DEVICE_FAIL = -234
    DISC_FAILED = -240
    DISCL_FAILED = -242
    DLJ_FAILED = -244
    DLQ_FAILED = -246
    RTS_FAIL = -248
    SAF_FAILED = -250
    NOTSUPPORTED = -268
    JOURNAL_FULL = -284
    JOURNAL_FAIL = -286
    # MRS's own
    BADPARAM = -1002
    """A request argument is out of range (priority, class, timeout...)."""
    NOSUCHQUEUE = -1004
    """The address names no group or queue of this bus."""
    NOTATTACHED = -1006
    """get/confirm on a connection that has not attached to a queue."""
    QUEUE_BUSY = -1008
    """Another connection is attached to that queue."""
    MSGTOOBIG = -1010
    """The body is larger than the target group's message_bytes_max."""
    PROTOCOL_ERROR = -1012
    """Malformed, oversized or out-of-order frame; the connection is closed."""
    SERVER_ERROR = -1014
    """An unexpected fault while serving the request; nothing stored was lost."""
    SHUTTING_DOWN = -1016
    """The server is stopping and takes no new work."""
    NOTAUTHORIZED = -1018
    """Authentication failed or is missing, or the principal lacks the permission for
    the request (MessageQ's table has no such status; see docs/security-auth.md)."""
    KEY_REUSED = -1030
    """An idempotency key was reused, within its dedupe window, for another body."""
    PROTECTION_ERROR = -1050
    """A message failed its queue's protection policy (clients.protection)."""

    @property
    def ok(self) -> bool:
        """True for success and information statuses (odd, positive)."""
        return self.value > 0


_STATUS_BY_VALUE: dict[int, Status] = {int(member): member for member in Status}
_MODE_BY_VALUE: dict[int, DeliveryMode] = {int(mode): mode for mode in DeliveryMode}


def delivery_mode_of(value: int) -> DeliveryMode:
    """DeliveryMode(value) by a dict lookup (every delivery a client reads and every
    record read back runs it); an unknown value raises as the enum does."""
    mode = _MODE_BY_VALUE.get(value)
    return mode if mode is not None else DeliveryMode(value)


def status_of(value: int) -> Status | int:
    """A Status member for a known value, the raw int for an unknown one (a dict
    lookup: this runs three times for every PSB a client receives)."""
    return _STATUS_BY_VALUE.get(value, value)


UMA_SUCCESS: dict[Uma, Status] = {
    Uma.DISC: Status.DISC_SUCCESS,
    Uma.DISCL: Status.DISCL_SUCCESS,
    Uma.DLJ: Status.DLJ_SUCCESS,
    Uma.DLQ: Status.DLQ_SUCCESS,
    Uma.RTS: Status.RTS_SUCCESS,
    Uma.SAF: Status.SAF_SUCCESS,
}
UMA_FAILURE: dict[Uma, Status] = {
    Uma.DISC: Status.DISC_FAILED,
    Uma.DISCL: Status.DISCL_FAILED,
    Uma.DLJ: Status.DLJ_FAILED,
    Uma.DLQ: Status.DLQ_FAILED,
    Uma.RTS: Status.RTS_FAIL,
    Uma.SAF: Status.SAF_FAILED,
}


NOTHING_KEPT_UMA_STATUSES = frozenset(
    {
        Status.DISC_SUCCESS,
        Status.DISCL_SUCCESS,
        Status.DISC_FAILED,
        Status.DISCL_FAILED,
        Status.SAF_FAILED,
        Status.DLQ_FAILED,
        Status.DLJ_FAILED,
        Status.RTS_FAIL,
    }
)
"""The UMA statuses of a put not delivered that say no copy was kept anywhere (its
UMA discarded it, or the UMA failed: docs/undeliverable.md)."""


class Psb(msgspec.Struct, frozen=True, gc=False):
    """PAMS Status Block: the outcome of a put (or the status of a delivered message).

    `status` is the function return status; `delivery_status` what the MRS did with
    the message; `uma_status` what the undeliverable message action did.

    A frozen msgspec Struct, not a frozen dataclass: every put a client makes builds
    one, and the dataclass's per-field object.__setattr__ cost about 1.1 µs of the
    client's ~23 µs per put (benchmarks/README.md). Its fields are ints, so the collector need
    not track it (gc=False).
    """

    status: Status | int
    delivery_status: Status | int
    seq: int
    uma_status: Status | int
    type_of_psb: int = 2
    call_dependent: int = 0

    @property
    def stored(self) -> bool:
        """True when the message reached its interest point (or was accepted for it)."""
        return int(self.status) > 0 and int(self.delivery_status) > 0  # > 0: a success

    @property
    def kept_no_copy(self) -> bool:
        """True when the message was not delivered and its UMA kept no copy anywhere:
        a put that may be made again without marking the next copy a possible duplicate
        (the DLQ handler's puts, mrs.dlq.handler and mrs.group.dlq_leases).

        LINK_DOWN is never "no copy": a put to another group is answered so when its
        link dropped after the message went and before the peer's answer came back,
        and the peer may hold it. Why: the DLQ handler put a memory letter again
        unmarked after such an answer, and the receiver got it twice, both copies
        unflagged (a letter tried while the link was down is flagged needlessly)."""
        if self.delivery_status == Status.LINK_DOWN:
            return False
        return int(self.delivery_status) <= 0 and self.uma_status in NOTHING_KEPT_UMA_STATUSES

    def to_wire(self) -> list[int]:
        return [int(self.status), int(self.delivery_status), self.seq, int(self.uma_status)]

    @classmethod
    def from_wire(cls, fields: list[int]) -> Psb:
        status, delivery_status, seq, uma_status = fields
        return cls(status_of(status), status_of(delivery_status), seq, status_of(uma_status))


RETURNED_HEADER = "mrs_returned"
"""Header of a message returned to its sender: {"original_target", "reason", "detail"}."""
REPLY_QUEUE_HEADER = "reply_q"
"""Header naming where the receiver replies (`Message.resp_q`): the put's `resp_q` as
"G.Q", written by the sender's group when the put named a queue other than its own,
or the application's own (MQ's ReplyToQ: "G.Q", "GROUP.QUEUE" or a queue name), which
the group leaves as it is. Why a header: it travels with the message wherever its
headers do (journals, links, the DLQ, a replay), and the DLQ handler's REPLYQ reads the
same one."""


@dataclass(slots=True)
class Message:
    """A message as an application receives it."""

    body: bytes
    seq: int
    source: Address
    target: Address
    msg_class: int = 0
    msg_type: int = 0
    priority: int = 0
    delivery: DeliveryMode = DeliveryMode.NN_MEM
    delivery_status: Status | int = Status.SUCCESS
    correlation_id: bytes = b""
    put_time_ns: int = 0
    dead_letter_header: dict | None = None
    headers: dict | None = None
    """Metadata the sender attached (a replayed message carries its origin here)."""
    _confirm: object = field(default=None, repr=False, compare=False)

    @property
    def needs_confirm(self) -> bool:
        """CONFIRMREQ/POSSDUPL messages must be confirmed with their seq."""
        return self.delivery_status in (Status.CONFIRMREQ, Status.POSSDUPL)

    @property
    def possible_duplicate(self) -> bool:
        return self.delivery_status == Status.POSSDUPL

    async def confirm(
        self,
        confirm_value: int = 0,
        force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
        *,
        timeout: float | None = None,
    ) -> None:
        """Confirm this message on the queue it was got from (like a nats ack); within
        `timeout` seconds (None: the connection's `request_timeout_s`), as the
        client's `confirm`."""
        if self._confirm is None:
            raise ValueError("this message was not received through a client connection")
        await self._confirm(self.seq, confirm_value=confirm_value, force_j=force_j, timeout=timeout)

    @property
    def resp_q(self) -> Address | str:
        """Where to send the reply (MessageQ's response queue): the `resp_q` the
        sender's put named, else the queue it was sent from (`source`). A queue name
        the sender's application wrote in its own `reply_q` header comes as that text;
        a put's target takes either. Why: `source` is always the sending queue, so a
        requester that asked for replies on another queue (a reply queue shared by its
        workers) was answered on its own, and nothing said where it asked."""
        named = (self.headers or {}).get(REPLY_QUEUE_HEADER)
        if not isinstance(named, str) or not named:
            return self.source
        try:
            return Address.parse(named)
        except ValueError:
            return named

    @property
    def original_target(self) -> Address | None:
        """For a message returned to its sender (UMA RTS, delivery status MSGUNDEL):
        the queue it was going to (MessageQ's show buffer `original_target`)."""
        returned = self._returned
        target = returned.get("original_target")
        return Address.parse(target) if isinstance(target, str) else None

    @property
    def return_reason(self) -> Status | int | None:
        """For a returned message: why it could not be delivered (e.g. DQF_FULL)."""
        reason = self._returned.get("reason")
        return status_of(reason) if type(reason) is int else None

    @property
    def _returned(self) -> dict:
        """The RETURNED_HEADER of a message a group returned (MSGUNDEL, which only a
        group sets); empty for any other. Why: an application may put any headers, and
        on a message delivered as usual an `mrs_returned` header is the sender's word,
        not the group's (read as it was, it named a forged target, and a malformed one
        raised KeyError from these properties)."""
        if self.delivery_status != Status.MSGUNDEL:
            return {}
        returned = (self.headers or {}).get(RETURNED_HEADER)
        return returned if isinstance(returned, dict) else {}

    @property
    def is_mrs_ack(self) -> bool:
        """An MRS_ACK: class 28, type -801, from a group's queue 0, where only a group
        sends from. Why the source: an application may put a message of that class and
        type, and a receiver took it for the group's word on its put (a forged PSB)."""
        return self._mrs_ack_shaped and self.source.queue == MRS_ACK_SOURCE_QUEUE

    @property
    def _mrs_ack_shaped(self) -> bool:
        """Class 28, type -801: an MRS_ACK's, or an application's that took them."""
        return self.msg_class == MRS_CLASS and self.msg_type == MRS_ACK_TYPE

    def ack_psb(self) -> Psb:
        """The PSB an MRS_ACK message carries (only for MRS_ACK messages)."""
        if not self.is_mrs_ack:
            if self._mrs_ack_shaped:
                raise ValueError(
                    f"not an MRS_ACK: class 28, type -801 from {self.source}, an "
                    "application's queue (an application put it, not the MRS)"
                )
            raise ValueError("not an MRS_ACK message")
        try:
            fields = msgpack.unpackb(self.body)
            if not (
                type(fields) is list
                and len(fields) == 4
                and all(type(field) is int for field in fields)
                and fields[2] >= 0
            ):  # a PSB is four ints, its seq >= 0: strings or a float are an application's
                raise ValueError(f"not four integers with a seq >= 0: {fields!r:.60}")
            return Psb.from_wire(fields)
        except (ValueError, TypeError) as error:  # msgpack's errors are ValueErrors
            raise ValueError(
                f"message {self.seq} from {self.source} has MRS_ACK's class and type but "
                f"its body is no PSB ({error}): an application put it, not the MRS"
            ) from None
