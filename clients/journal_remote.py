"""The journals through the group, for an application on another host:
`Client.open_journal` reads the PCJ or the DLJ page by page (MessageQ's pams_open_jrn
/ pams_read_jrn / pams_close_jrn), and `Client.set_pcj` sets the PCJ's default
journaling action and rolls its segment (MRS_SET_PCJ).

Why the records come as the journal stores them: the reader decodes and checks them
with the journal library and turns them into `JournalRecord`s with the local reader's
one conversion (clients.journal_reader.journal_record), and selects with the same
`RecordQuery`, so a record reads the same from the files and over the wire.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import trio

from clients.errors import BadParameter, MrsError, error_for
from clients.journal_reader import (
    IntSelection,
    JournalRecord,
    QueueSelection,
    ReadAhead,
    TimeBound,
    checked_journal,
    selection,
)
from clients.lookup import Requester
from clients.requests import built
from journals import CorruptRecord, decode_record
from mrs import protocol as wire
from mrs.limits import JOURNAL_PAGE_RECORDS_MAX, JOURNAL_SELECT_ITEMS_MAX, REPLY_GRACE_S
from mrs.model import ForceJrn, Status
from mrs.storage.journal_scan import RecordQuery


@dataclass(frozen=True, slots=True)
class PcjState:
    """The group's PCJ after a `set_pcj`."""

    default: bool
    """Whether a confirm with DEFAULT_JRN writes the PCJ."""
    segment: int
    """The segment new confirmations are journaled in."""
    opened_ns: int
    """When that segment was opened (0: segment 0, open since the first start)."""
    closed_segment: int | None
    """The segment this call closed (roll=True), which an auditor or `mrs pcj archive
    --closed` may now take whole; None when it rolled none."""


_PCJ_DEFAULTS = {None: ForceJrn.DEFAULT_JRN, True: ForceJrn.FORCE_JRN, False: ForceJrn.NO_JRN}


def _pcj_default(default: Any) -> int:
    """set_pcj's `default` in force_j's numbers, as SetPcj carries it: None (or
    DEFAULT_JRN) leaves the group's default, True/FORCE_JRN and False/NO_JRN set it."""
    if default is None or type(default) is bool:
        return int(_PCJ_DEFAULTS[default])
    if type(default) in (int, ForceJrn) and default in tuple(ForceJrn):
        return int(default)
    raise BadParameter(
        Status.BADPARAM,
        f"set_pcj: default is True, False, None (unchanged) or a ForceJrn, got {default!r}",
    )


async def set_pcj(client: Requester, default: Any, roll: Any) -> PcjState:
    await client.linked(Status.NOTACTIVE, "set_pcj")
    if type(roll) is not bool:
        raise BadParameter(Status.BADPARAM, f"set_pcj: roll is True or False, got {roll!r}")
    request = built(wire.SetPcj, client.next_id(), _pcj_default(default), roll)
    reply = cast(wire.PcjState, await client.request(request, REPLY_GRACE_S, "other"))
    closed = None if reply.closed_segment < 0 else reply.closed_segment
    return PcjState(reply.default, reply.segment, reply.opened_ns, closed)


def _texts(addresses: frozenset[tuple[int, int]] | None) -> list[str]:
    return [] if addresses is None else sorted(f"{group}.{queue}" for group, queue in addresses)


def _ints(values: frozenset[int] | None) -> list[int]:
    return [] if values is None else sorted(values)


def _fields(journal: str, query: RecordQuery, page_records: int) -> dict[str, Any]:
    """The ReadJournal fields of a query, but request_id and after_seq."""
    fields: dict[str, Any] = {
        "journal": journal,
        "seq_max": -1 if query.seq_max is None else query.seq_max,
        "since_ns": -1 if query.since_ns is None else query.since_ns,
        "until_ns": -1 if query.until_ns is None else query.until_ns,
        "targets": _texts(query.targets),
        "sources": _texts(query.sources),
        "classes": _ints(query.classes),
        "types": _ints(query.types),
        "segments": _ints(query.segments),
        "page_records": page_records,
    }
    for name in ("targets", "sources", "classes", "types", "segments"):
        if len(fields[name]) > JOURNAL_SELECT_ITEMS_MAX:
            raise BadParameter(
                Status.BADPARAM,
                f"open_journal: {name} lists at most {JOURNAL_SELECT_ITEMS_MAX} values",
            )
    return fields


@dataclass(eq=False)
class RemoteJournalReader:
    """An open journal of the group: iterate it (`async for`) for its selected records
    in seq order, page by page; `close()` it (or `async with`). Records the reader
    cannot decode are skipped and listed in `corrupt` (one line each): check it after
    the loop. Where it is (records read and not handed out, the last seq, the limit,
    the end) is the local reader's own `ReadAhead` (clients.journal_reader)."""

    journal: str
    _client: Requester | None
    _fields: dict[str, Any]
    limit: int | None = None
    _ahead: ReadAhead = field(init=False)
    _filling: trio.Lock = field(default_factory=trio.Lock)
    """Held while a page is asked for (`fill`): one page at a time, so a second ask
    made while the first is still answered (an interrupted blocking call) reads on."""

    def __post_init__(self) -> None:
        self._ahead = ReadAhead(self.journal, self.limit)

    @property
    def corrupt(self) -> list[str]:
        """A line for each record that could not be decoded (skipped)."""
        return self._ahead.corrupt

    async def read_page(self) -> list[JournalRecord]:
        """The next selected records (at most the page size): those read and not yet
        handed out, else the next page asked of the group; [] at the end. A page of
        records that are all filtered out is read on. Asked again after the end, it
        reads on from the last seq read, as the local reader does: a reader iterated
        again reads the records written since."""
        await self.fill()
        return self._ahead.take_all()

    async def fill(self) -> bool:
        """Unless records read before wait to be handed out, ask the group for the next
        page(s) of them; whether any wait now (False: the end)."""
        if self._client is None:
            raise MrsError(Status.NOTACTIVE, f"the {self.journal} reader is closed")
        async with self._filling:
            ahead = self._ahead
            while ahead.wants_read():
                page = await self._next_page()
                for raw in page.records:
                    if not ahead.room(1):
                        break  # the limit is reached: the rest of the page is not read
                    try:
                        ahead.add(decode_record(raw, self.journal))
                    except CorruptRecord as corrupt:
                        ahead.add(corrupt)
                if page.done:
                    ahead.reached_end()
                    break
        return ahead.unread > 0

    def take(self) -> JournalRecord:
        """The oldest record `fill` read and nobody was handed yet (there is one)."""
        return self._ahead.take()

    @property
    def unread(self) -> int:
        """Records read from the group and not handed out yet."""
        return self._ahead.unread

    async def _next_page(self) -> wire.JournalPage:
        """The group's next page after the last seq read past (checked to move on)."""
        client = self._client
        if client is None:
            raise MrsError(Status.NOTACTIVE, f"the {self.journal} reader is closed")
        ahead = self._ahead
        after_seq = -1 if ahead.after_seq is None else ahead.after_seq
        request = built(
            functools.partial(wire.ReadJournal, after_seq=after_seq, **self._fields),
            client.next_id(),
        )
        page = cast(wire.JournalPage, await client.request(request, REPLY_GRACE_S, "other"))
        _check_progress(page, after_seq, self.journal)
        ahead.passed(page.last_seq)
        ahead.corrupt.extend(page.corrupt)
        return page

    async def _records(self) -> AsyncIterator[JournalRecord]:
        ahead = self._ahead
        while ahead.unread or await self.fill():
            yield ahead.take()  # handed out: a loop stopped now has it

    def __aiter__(self) -> AsyncIterator[JournalRecord]:
        return self._records()

    def close(self) -> None:
        """pams_close_jrn: nothing is held on the group; the reader reads no more."""
        self._client = None
        self._ahead.clear()

    async def __aenter__(self) -> RemoteJournalReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


def _check_progress(page: wire.JournalPage, after_seq: int, journal: str) -> None:
    """PROTOCOL_ERROR for a page that goes back (`last_seq` before the seq asked after:
    its records would be read twice) or that is not the last and moves on by nothing.
    Why: the reader reads on until a page says `done`, and a broken server's page
    that did not move on was asked again and again for ever: `read_page` never
    returned. A group's page that is not done has looked at a record after
    `after_seq` (mrs.group.journal_pages.read_page), so its `last_seq` is past it."""
    if page.last_seq < after_seq or (not page.done and page.last_seq == after_seq):
        raise error_for(
            Status.PROTOCOL_ERROR,
            f"the server's {journal} page after seq {after_seq} ends at seq {page.last_seq} "
            f"({'the last page' if page.done else 'more to come'}): a page must move on",
        )


def open_remote(
    client: Requester,
    journal: str = "pcj",
    *,
    seq: int | tuple[int | None, int | None] | None = None,
    since: TimeBound = None,
    until: TimeBound = None,
    target: QueueSelection = None,
    source: QueueSelection = None,
    msg_class: IntSelection = None,
    msg_type: IntSelection = None,
    segment: IntSelection = None,
    limit: int | None = None,
    page_records: int = JOURNAL_PAGE_RECORDS_MAX,
) -> RemoteJournalReader:
    """`Client.open_journal`'s work: the arguments checked (BadParameter, one line),
    nothing asked of the group before the first page."""
    client.require_link(Status.NOTACTIVE, "open_journal")
    name = checked_journal(journal, limit)
    if type(page_records) is not int or not 1 <= page_records <= JOURNAL_PAGE_RECORDS_MAX:
        raise BadParameter(
            Status.BADPARAM,
            f"open_journal: page_records is 1..{JOURNAL_PAGE_RECORDS_MAX}, got {page_records!r}",
        )
    query = selection(seq, since, until, target, source, msg_class, msg_type, segment)
    fields = _fields(name, query, page_records)
    reader = RemoteJournalReader(name, client, fields, limit)
    if query.seq_min:
        reader._ahead.passed(query.seq_min - 1)
    return reader
