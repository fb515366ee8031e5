"""Room: pages of the group's PCJ or DLJ for a journal reader on another host
(MessageQ's pams_read_jrn over the wire; the client's `Client.open_journal`).

Why pages with no cursor kept here: each ReadJournal says where to go on (the last
seq read), so a reader that goes away leaves nothing open on the group, and each page
is one short read transaction (`Store.items_after`) on the event loop, bounded in
records looked at, in bytes and in records sent (mrs.limits JOURNAL_PAGE_*). LMDB's
readers never block the writer, so reading is safe while the group writes the
journal; a record confirmed meanwhile is in a later page if its seq is after the
reader's place (a PCJ is in seq order, not confirm order: a reader that follows a
live PCJ reads again from the start, or by time).

The selection is `mrs.storage.journal_scan.RecordQuery`, the one a local reader
(clients.journal_reader) uses; records travel as the journal stores them, so the
reader decodes and checks them exactly as a local reader does.
"""

from __future__ import annotations

from journals import CorruptRecord, Journal, decode_record, seq_key
from journals.protocol import Store
from mrs import protocol as wire
from mrs.core.delivery import Refused
from mrs.limits import JOURNAL_PAGE_BYTES_MAX, JOURNAL_PAGE_SCAN_MAX
from mrs.model import Address, Status
from mrs.storage.journal_scan import RecordQuery, seq_of_key

JOURNALS = {"pcj": Journal.PCJ, "dlj": Journal.DLJ}


def _addresses(texts: list[str], what: str) -> frozenset[tuple[int, int]] | None:
    if not texts:
        return None
    found = set()
    for text in texts:
        try:
            address = Address.parse(text)
        except (ValueError, TypeError):
            raise Refused(Status.BADPARAM, f"{what}: {text!r} is not GROUP.QUEUE") from None
        found.add((address.group, address.queue))
    return frozenset(found)


def query_of(request: wire.ReadJournal) -> RecordQuery:
    """The request's selection as a RecordQuery, or Refused BADPARAM with one line."""
    if request.since_ns >= 0 and request.until_ns >= 0 and request.since_ns > request.until_ns:
        raise Refused(Status.BADPARAM, "since is after until: nothing can match")

    def bound(value: int) -> int | None:
        return None if value < 0 else value

    def ints(values: list[int]) -> frozenset[int] | None:
        return frozenset(values) if values else None

    return RecordQuery(
        seq_max=bound(request.seq_max),
        since_ns=bound(request.since_ns),
        until_ns=bound(request.until_ns),
        targets=_addresses(request.targets, "target"),
        sources=_addresses(request.sources, "source"),
        classes=ints(request.classes),
        types=ints(request.types),
        segments=ints(request.segments),
    )


def read_page(store: Store, request: wire.ReadJournal) -> wire.JournalPage:
    """The next page after `request.after_seq`: up to page_records matching records
    from at most JOURNAL_PAGE_SCAN_MAX looked at (about JOURNAL_PAGE_BYTES_MAX)."""
    query = query_of(request)
    after_key = seq_key(request.after_seq) if request.after_seq >= 0 else None
    look_max = request.page_records if query.selects_all else JOURNAL_PAGE_SCAN_MAX
    items = store.items_after(
        JOURNALS[request.journal], b"", after_key, look_max, JOURNAL_PAGE_BYTES_MAX
    )
    records: list[bytes] = []
    corrupt: list[str] = []
    last_seq = request.after_seq
    done = not items
    for key, value in items:
        seq = seq_of_key(key)
        if query.seq_max is not None and seq > query.seq_max:
            done = True
            break
        last_seq = seq
        try:
            record = decode_record(value, request.journal, key)
        except CorruptRecord as error:
            corrupt.append(str(error))
            continue
        if query.matches(record):
            records.append(bytes(value))
            if len(records) >= request.page_records:
                break
    return wire.JournalPage(request.request_id, records, corrupt, last_seq, done)
