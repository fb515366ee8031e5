"""The connection's states, its event kinds and the frame codec (mrs.protocol.connection's tables).

Which events each side may send in each state, which of them take or free a request
id, and the msgspec decoder of every event: data, kept apart from the state machine
that reads it so that each module stays one job long.
"""

from __future__ import annotations

import struct
from typing import Any, Union

import msgspec

from mrs.protocol.admin_events import ADMIN_REPLIES, ADMIN_REQUESTS
from mrs.protocol.events import (
    CLIENT_EVENTS,
    HEARTBEAT_EVENTS,
    SERVER_EVENTS,
    AnswerBatch,
    Attach,
    Attached,
    CancelGet,
    Confirm,
    Confirmed,
    Delivery,
    DeliveryBatch,
    Failure,
    Fatal,
    Get,
    GetBatch,
    GiveBack,
    Hello,
    JournalPage,
    Locate,
    Located,
    PcjState,
    PendingCounts,
    Put,
    PutBatch,
    PutDone,
    ReadJournal,
    SetPcj,
    ShowPending,
    StatusReply,
    StatusRequest,
    Welcome,
)
from mrs.protocol.link_events import (
    LINK_EVENTS,
    LinkAck,
    LinkNotice,
    LinkPendingCounts,
    LinkPendingQuery,
    LinkTransfer,
)

_HEADER = struct.Struct(">I")
_HEADER_BYTES = _HEADER.size
_UINT32_MAX = 2**32 - 1


# -- sentinels ----------------------------------------------------------------------


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA = _Sentinel("NEED_DATA")
"""`next_event`: no complete frame is buffered; feed more bytes."""
CLOSED = _Sentinel("CLOSED")
"""`next_event`: the peer closed (EOF with an empty buffer), or a Fatal was exchanged."""


_ALL_EVENTS = frozenset(CLIENT_EVENTS + SERVER_EVENTS)
_BY_CODE = {cls.code: cls for cls in _ALL_EVENTS}
assert len(_BY_CODE) == len(_ALL_EVENTS), "duplicate event code"


def _refuse_ext(code: int, data: memoryview) -> Any:
    """msgpack ext types are not MRS data: refuse them (explain words it)."""
    raise ValueError(f"ext type {code}")


_DECODE = msgspec.msgpack.Decoder(
    Union[tuple(sorted(_ALL_EVENTS, key=lambda c: c.code))],  # noqa: UP007 - built at runtime
    ext_hook=_refuse_ext,
).decode
_ENCODE_INTO = msgspec.msgpack.Encoder().encode_into


# -- state machine ------------------------------------------------------------------

CLIENT = "client"
SERVER = "server"
START = "START"
OPEN = "OPEN"
# CLOSED (the sentinel above) doubles as the state after a Fatal.

_REQUESTS = dict.fromkeys(
    (
        Attach,
        Put,
        PutBatch,
        Get,
        GetBatch,
        Confirm,
        StatusRequest,
        Locate,
        ShowPending,
        SetPcj,
        ReadJournal,
        CancelGet,
        GiveBack,
    )
    + ADMIN_REQUESTS
    + LINK_EVENTS
    + HEARTBEAT_EVENTS,
    OPEN,
)
_REPLIES = dict.fromkeys(
    (
        Attached,
        PutDone,
        Delivery,
        DeliveryBatch,
        Confirmed,
        AnswerBatch,
        StatusReply,
        Located,
        PendingCounts,
        PcjState,
        JournalPage,
        Failure,
    )
    + ADMIN_REPLIES
    + LINK_EVENTS
    + HEARTBEAT_EVENTS,
    OPEN,
)

_TRANSITIONS: dict[str, dict[Any, dict[type, Any]]] = {
    CLIENT: {
        START: {Hello: OPEN},
        OPEN: _REQUESTS,
    },
    SERVER: {
        START: {Welcome: OPEN, Fatal: CLOSED},
        OPEN: {**_REPLIES, Fatal: CLOSED},
    },
}
_SENDS = {CLIENT: frozenset(CLIENT_EVENTS), SERVER: frozenset(SERVER_EVENTS)}

# Request-id tracking: each request is answered exactly once (a Get by its Delivery or
# Failure; a CancelGet, a GiveBack, a Ping and a Pong are not requests), and while it waits for
# that answer its id may not be used again by the same side.
_ASKS, _ASKS_MANY, _ANSWERS, _ANSWERS_MANY, _OTHER_KIND = (
    "asks",
    "asks many",
    "answers",
    "answers many",
    "other",
)
_TRANSFERS, _ACKS = "transfers", "acks"
"""A LinkTransfer or a LinkNotice (a request whose messages' or notices' seqs its
answer must name) and a LinkAck (whose results must name them, one per item, in
order): they take the long way (`Connection._process`), which keeps each one's seqs
until its answer came."""
_REQUEST_KIND = {
    PutBatch: _ASKS_MANY,  # no id of its own: each of its puts is a request
    LinkTransfer: _TRANSFERS,
    LinkNotice: _TRANSFERS,
    LinkAck: _ACKS,
    AnswerBatch: _ANSWERS_MANY,  # no id of its own: each of its items is an answer
    **dict.fromkeys(
        (
            Attach,
            Put,
            Get,
            GetBatch,
            Confirm,
            StatusRequest,
            Locate,
            ShowPending,
            SetPcj,
            ReadJournal,
            LinkPendingQuery,
            *ADMIN_REQUESTS,
        ),
        _ASKS,
    ),
    **dict.fromkeys(
        (
            Attached,
            PutDone,
            Delivery,
            DeliveryBatch,
            Confirmed,
            StatusReply,
            Located,
            PendingCounts,
            PcjState,
            JournalPage,
            Failure,
            LinkPendingCounts,
            *ADMIN_REPLIES,
        ),
        _ANSWERS,
    ),
}
_STEADY = {
    role: {
        cls: _REQUEST_KIND.get(cls) for cls, new in _TRANSITIONS[role][OPEN].items() if new is OPEN
    }
    for role in (CLIENT, SERVER)
}
_OTHER = {CLIENT: SERVER, SERVER: CLIENT}
