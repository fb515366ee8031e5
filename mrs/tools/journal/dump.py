"""`mrs dump` (dmqdump): print the records of a group's SAF, DQF, DLJ or PCJ.

Why it looks like this: an operator inspects before acting. Dump reads the
journals read-only in pages, each from one LMDB snapshot read whole before it is
printed (`journal_scan.scan_paged`), so it is safe while the server runs: it shows
no half of a commit, and a dump whose output waits (`| less`) holds no snapshot, which
kept every page the server freed meanwhile from reuse until its journal was full.
Two outputs:

- an aligned table (default, rich) for people;
- `--json`: exactly one JSON object per record on stdout and nothing else, so it
  pipes into `jq`; the summary and any corrupt-record reports go to stderr.

Bytes (bodies, correlation ids) are shown as UTF-8 text when they are printable
text, else as `hex:...` — the same convention `--contains` accepts.
Exit status: 0, 1 if corrupt records were found (reported, never hidden), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from rich.cells import cell_len
from rich.table import Table

from journals import CorruptRecord, Journal, Record
from mrs.config.bus import ConfigError
from mrs.offline.journal_files import JournalsNotFound, locate, open_store
from mrs.offline.scalars import format_time_ns
from mrs.offline.selection import (
    RecordFilter,
    SelectionError,
    filter_from_args,
    record_time_ns,
)
from mrs.storage.journal_scan import scan_paged
from mrs.tools.console import ToolConsole
from mrs.tools.journal.arguments import PREVIEW_BYTES
from mrs.tools.journal.render import (
    DELIVERY_NAMES,
    principal_of,
    record_json,
    render_bytes,
    status_name,
    target_text,
)

TABLE_PAGE_ROWS = 500
JSON_FLUSH_LINES = 2000
FLUSH_CHARS = 4 << 20
"""Output is written once this much text waits, whatever the rows or lines: with
`--body-full` a row carries a whole body (a 1 MiB body is 2 MiB of hex), and 2,000
lines of them held 2.4 GB for 400 records of 1 MiB."""


@dataclass
class Summary:
    """What a dump saw: the line an operator reads first."""

    journal: Journal
    group_id: int
    records: int = 0
    body_bytes: int = 0
    oldest_ns: int = 0
    newest_ns: int = 0
    corrupt: int = 0

    def add(self, record: Record) -> None:
        self.records += 1
        self.body_bytes += len(record.body)
        moment = record_time_ns(record)
        if moment:
            if not self.oldest_ns or moment < self.oldest_ns:
                self.oldest_ns = moment
            if moment > self.newest_ns:
                self.newest_ns = moment

    def line(self) -> str:
        which = "confirm time" if self.journal is Journal.PCJ else "time written"
        text = (
            f"{self.journal.value}{f' of group {self.group_id}' if self.group_id else ''}: "
            f"{self.records} record{'' if self.records == 1 else 's'}, "
            f"{self.body_bytes} body bytes"
        )
        if self.records:
            text += (
                f", oldest {format_time_ns(self.oldest_ns)}, "
                f"newest {format_time_ns(self.newest_ns)} ({which})"
            )
        if self.corrupt:
            noun = "record" if self.corrupt == 1 else "records"
            text += f"; {self.corrupt} CORRUPT {noun} (reported above, not shown)"
        return text


# ---------------------------------------------------------------------- table
def _columns(journal: Journal, body: str | None) -> list[str]:
    columns = ["seq", "time", "source", "target", "class", "type", "prio", "bytes"]
    if journal is Journal.DLJ:
        columns.append("reason")
    if journal is Journal.PCJ:
        columns.append("confirm")
    if journal in (Journal.DQF, Journal.SAF):
        columns.append("delivery")
    columns.append("corr id")
    if body is not None:
        columns.append("body")
    return columns


def _row(journal: Journal, record: Record, body: str | None) -> list[str]:
    row = [
        str(record.seq),
        format_time_ns(record_time_ns(record)),
        _source_text(record),
        target_text(record),
        str(record.msg_class),
        str(record.msg_type),
        str(record.priority),
        str(len(record.body)),
    ]
    if journal is Journal.DLJ:
        row.append(status_name(record.reason))
    if journal is Journal.PCJ:
        row.append(str(record.confirm_value))
    if journal in (Journal.DQF, Journal.SAF):
        row.append(DELIVERY_NAMES.get(record.delivery, str(record.delivery)))
    row.append(render_bytes(record.correlation_id, 16)[0] if record.correlation_id else "")
    if body is not None:
        text, truncated = render_bytes(record.body, PREVIEW_BYTES if body == "preview" else None)
        row.append(text + ("…" if truncated else ""))
    return row


def _source_text(record: Record) -> str:
    """The sender's queue, and who put the message when the record kept its principal
    (`[auth]` on): `1.13 (producer)`."""
    source = f"{record.source_group}.{record.source_queue}"
    principal = principal_of(record)
    return source if principal is None else f"{source} ({principal})"


RIGHT_ALIGNED = ("seq", "class", "type", "prio", "bytes")
COLUMN_GAP = "  "
"""Between two columns: what rich's Table puts there (padding 1 each side, no box)."""


class _TablePrinter:
    """Prints rows in pages so a large dump streams; every page uses the column widths
    of the first one, so the columns stay aligned from the first row to the last.

    Why not rich for every page: its Table costs a large dump many times its JSON
    output (benchmarks/README.md, "A dump's table"). The first page, and any page with
    a cell rich would cut or fold, go through rich; a later page whose cells all fit
    is written as the same text, padded here."""

    def __init__(self, console: ToolConsole, columns: list[str]) -> None:
        self.console = console
        self.columns = columns
        self.rows: list[list[str]] = []
        self.chars = 0
        self.widths: list[int] | None = None

    def add(self, row: list[str]) -> None:
        self.rows.append(row)
        self.chars += len(row[-1])  # the body, when shown, is the last cell
        if len(self.rows) >= TABLE_PAGE_ROWS or self.chars >= FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.rows and self.widths is not None:
            return
        first = self.widths is None
        if self.widths is None:
            self.widths = [
                max([len(name)] + [len(row[i]) for row in self.rows])
                for i, name in enumerate(self.columns)
            ]
        page_widths = self._page_widths(self.widths)
        if not first and page_widths is not None:
            self._write_plain(page_widths)
        else:
            self._print_rich(self.widths, first)
        self.rows.clear()
        self.chars = 0

    def _page_widths(self, widths: list[int]) -> list[int] | None:
        """The widths rich would give this page's columns if it prints every row as its
        cells, padded; None if it would not: a cell wider than its column (cut), a line
        wider than the console (folded), a character rich treats specially. The last
        column grows to its widest cell, as rich lets it."""
        last = max([widths[-1]] + [cell_len(row[-1]) for row in self.rows])
        page = [*widths[:-1], last]
        if sum(page) + len(COLUMN_GAP) * (len(page) - 1) > self.console.width:
            return None
        fits = all(
            cell_len(cell) <= width and cell.isprintable()
            for row in self.rows
            for cell, width in zip(row, page, strict=True)
        )
        return page if fits else None

    def _write_plain(self, widths: list[int]) -> None:
        right = [name in RIGHT_ALIGNED for name in self.columns]
        lines = []
        for row in self.rows:
            cells = []
            for cell, width, to_right in zip(row, widths, right, strict=True):
                pad = " " * (width - cell_len(cell))
                cells.append(pad + cell if to_right else cell + pad)
            lines.append(COLUMN_GAP.join(cells))
        self.console.file.write("\n".join(lines) + "\n")
        self.console.file.flush()

    def _print_rich(self, widths: list[int], first: bool) -> None:
        table = Table(show_header=first, box=None, pad_edge=False, header_style="bold")
        for index, name in enumerate(self.columns):
            last = index == len(self.columns) - 1
            table.add_column(
                name,
                justify="right" if name in RIGHT_ALIGNED else "left",
                min_width=widths[index],
                max_width=None if last else widths[index],
                no_wrap=not last,
                overflow="fold" if last else "ellipsis",
            )
        for row in self.rows:
            table.add_row(*row)
        self.console.print(table, soft_wrap=False, highlight=False, markup=False)


# ---------------------------------------------------------------------- command
def run_dump(args: argparse.Namespace) -> int:
    if getattr(args, "client_saf", None) is not None and args.journal in (None, "saf", "dlj"):
        # a client journal holds its SAF records and those the group refused (dlj)
        args.journal = args.journal or "saf"
    elif args.journal is None or getattr(args, "client_saf", None) is not None:
        print(
            "mrs dump: give a journal (saf, dqf, dlj or pcj), or --client-saf PATH alone "
            "(or with dlj: the records its group refused)",
            file=sys.stderr,
        )
        return 2
    journal = Journal(args.journal)
    try:
        where = locate(args, group_optional=True)
        selection = filter_from_args(args, journal, where.bus, where.group_id, time.time_ns())
    except (SelectionError, JournalsNotFound) as error:
        print(f"mrs dump: {error}", file=sys.stderr)
        return 2
    except ConfigError:
        raise
    store = open_store(where)
    try:
        if args.json:
            summary = _dump_json(store, journal, selection, where.group_id, args.body)
        else:
            summary = _dump_table(store, journal, selection, where.group_id, args.body)
    finally:
        store.close()
    print(summary.line(), file=sys.stderr if args.json else sys.stdout)
    return 1 if summary.corrupt else 0


def _report_corrupt(corrupt: CorruptRecord) -> None:
    print(f"mrs dump: {corrupt}", file=sys.stderr)


def _selected(store, journal, selection: RecordFilter, summary: Summary) -> Iterator[Record]:
    """The selected records, counted into `summary`, up to the selection's limit.

    Why one place: both output formats must count, report corrupt records and stop at
    the limit the same way; a corrupt record is reported and counted, never yielded.
    """
    for _key, record in scan_paged(store, journal, selection):
        if isinstance(record, CorruptRecord):
            summary.corrupt += 1
            _report_corrupt(record)
            continue
        summary.add(record)
        yield record
        if selection.limit is not None and summary.records >= selection.limit:
            return


def _dump_json(store, journal, selection: RecordFilter, group_id: int, body) -> Summary:
    summary = Summary(journal, group_id)
    out = sys.stdout
    lines: list[str] = []
    chars = 0
    for record in _selected(store, journal, selection, summary):
        lines.append(line := record_json(journal, record, body))
        chars += len(line)
        if len(lines) >= JSON_FLUSH_LINES or chars >= FLUSH_CHARS:
            out.write("\n".join(lines) + "\n")
            lines.clear()
            chars = 0
    if lines:
        out.write("\n".join(lines) + "\n")
    out.flush()
    return summary


def _dump_table(store, journal, selection: RecordFilter, group_id: int, body) -> Summary:
    summary = Summary(journal, group_id)
    console = ToolConsole(width=None if sys.stdout.isatty() else 200)
    printer = _TablePrinter(console, _columns(journal, body))
    for record in _selected(store, journal, selection, summary):
        printer.add(_row(journal, record, body))
    if summary.records:
        printer.flush()
    return summary
