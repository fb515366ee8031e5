"""Journal events: the PCJ's control (MessageQ's MRS_SET_PCJ) and a reader of the PCJ
or DLJ on another host (pams_open_jrn / pams_read_jrn / pams_close_jrn over the wire).

Apart from `events` because they are one concept of their own, answered from the
group's journals; the connection's tables list them beside the others. A reader's
requests carry no server-side cursor: each ReadJournal names where to go on (the
last seq read), so nothing is left open on the group when a reader goes away, and
`pams_close_jrn` is the client's alone.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from mrs.limits import (
    JOURNAL_PAGE_RECORDS_MAX,
    JOURNAL_SELECT_ITEMS_MAX,
    QUEUE_NAME_CHARS_MAX,
)
from mrs.protocol.base import EventStruct, finish
from mrs.protocol.fields import I64, RequestId

PcjDefault = Annotated[int, Meta(ge=0, le=2)]
"""MRS_SET_PCJ's default journaling action, in force_j's numbers: 0 (DEFAULT_JRN)
leaves it as it is, 1 (FORCE_JRN) journals confirmations by default, 2 (NO_JRN) does
not."""
ReadableJournal = Literal["pcj", "dlj"]
SelectQueues = Annotated[
    list[Annotated[str, Meta(min_length=1, max_length=QUEUE_NAME_CHARS_MAX)]],
    Meta(max_length=JOURNAL_SELECT_ITEMS_MAX),
]
"""Queues as `G.Q`; an empty list selects every queue."""
SelectInts = Annotated[list[I64], Meta(max_length=JOURNAL_SELECT_ITEMS_MAX)]
"""Classes, types or segments; an empty list selects all."""
PageRecords = Annotated[int, Meta(ge=1, le=JOURNAL_PAGE_RECORDS_MAX)]
OptionalBound = Annotated[int, Meta(ge=-1)]
"""A seq or a time in ns, or -1 for none."""


class SetPcj(EventStruct, tag=60):
    """MessageQ's MRS_SET_PCJ: set the group's default journaling action of
    confirmations (kept in its META journal, so it survives a restart) and, with
    `roll`, close the current PCJ segment and open the next. Answered by PcjState
    once durable, or Failure. Needs the admin right 'pcj'."""

    request_id: RequestId
    default: PcjDefault = 0
    roll: bool = False


class PcjState(EventStruct, tag=61):
    """The answer to a SetPcj: the default journaling action now, the segment new
    confirmations are journaled in, when it was opened, and the segment this request
    closed (-1 when it rolled none)."""

    request_id: RequestId
    default: bool
    segment: I64
    opened_ns: I64
    closed_segment: I64


class ReadJournal(EventStruct, tag=62):
    """One page of the group's PCJ or DLJ (pams_read_jrn for a reader on another
    host): the records after seq `after_seq` (-1: from the first) that the selection
    matches, in seq order. Every bound given must hold; an empty list selects all.
    Answered by JournalPage, or Failure. Needs the admin right 'replay'."""

    request_id: RequestId
    journal: ReadableJournal
    after_seq: OptionalBound = -1
    seq_max: OptionalBound = -1
    since_ns: OptionalBound = -1
    until_ns: OptionalBound = -1
    targets: SelectQueues = []
    sources: SelectQueues = []
    classes: SelectInts = []
    types: SelectInts = []
    segments: SelectInts = []
    page_records: PageRecords = JOURNAL_PAGE_RECORDS_MAX


class JournalPage(EventStruct, tag=63):
    """The answer to a ReadJournal: the records as the journal stores them (versioned,
    checksummed: the reader decodes and checks them as a local reader does), the
    corrupt records met (one line each), the last seq looked at (the next request's
    `after_seq`; -1 when none was) and whether the journal has no more."""

    request_id: RequestId
    records: list[bytes]
    corrupt: list[str]
    last_seq: OptionalBound
    done: bool


finish(SetPcj, PcjState, ReadJournal, JournalPage)
