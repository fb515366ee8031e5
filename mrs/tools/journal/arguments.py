"""The command lines of `mrs dump` and `mrs jplay` (dmqdump / dmqjplay).

Why apart from the tools themselves: `mrs` builds its whole parser on every start,
`mrs serve` included, and the tools import rich, trio and the client library. The
arguments live here, with only what they need, so `mrs serve` does not pay for the
journal tools; the tools are imported when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mrs.offline.journal_files import add_location_arguments, operator_path
from mrs.offline.selection import add_selection_arguments

PREVIEW_BYTES = 48
DEFAULT_SENDER_QUEUE = "REPLAY"
"""The queue jplay attaches to unless told `--as`: configure one per group."""
DEFAULT_WINDOW = 2048


def add_journal_tools(commands, run_dump: Callable, run_jplay: Callable) -> None:
    """Add the `dump` and `jplay` subcommands to the `mrs` subparsers."""
    dump = commands.add_parser(
        "dump",
        help="print a journal's records (table or JSON lines), with selection (alias dmqdump)",
        description="Print the records of a group's SAF, DQF, DLJ or PCJ. Read-only and "
        "safe while the server runs (one consistent snapshot). Exit 0, 1 if corrupt records "
        "were found, 2 bad usage. See docs/journal-tools.md.",
    )
    add_dump_arguments(dump)
    add_location_arguments(dump)
    add_selection_arguments(dump)
    dump.set_defaults(run=run_dump)

    jplay = commands.add_parser(
        "jplay",
        help="replay PCJ or DLJ records through a running server (alias dmqjplay)",
        description="Resend selected PCJ or DLJ records to their targets or --to QUEUE. "
        "Each record is replayed at most once (a ledger in the data directory) unless "
        "--again; an interrupted replay resumes when run again. Exit 0 done, 1 some failed, "
        "2 bad usage, 130 interrupted. See docs/journal-tools.md.",
    )
    add_jplay_arguments(jplay)
    add_location_arguments(jplay)
    add_selection_arguments(jplay)
    jplay.set_defaults(run=run_jplay)


def add_dump_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("journal", nargs="?", choices=["saf", "dqf", "dlj", "pcj"])
    parser.add_argument(
        "--client-saf",
        type=operator_path,
        metavar="PATH",
        help="read a client library's SAF journal (connect(..., saf_journal=PATH)) instead",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per record on stdout (for jq)"
    )
    bodies = parser.add_mutually_exclusive_group()
    bodies.add_argument(
        "--body",
        dest="body",
        action="store_const",
        const="preview",
        help=f"show a preview of each body (the first {PREVIEW_BYTES} bytes)",
    )
    bodies.add_argument(
        "--body-full", dest="body", action="store_const", const="full", help="show whole bodies"
    )


def add_jplay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("journal", choices=["pcj", "dlj"])
    parser.add_argument(
        "--address", help="HOST:PORT of the group's server (default: its listen from --config)"
    )
    parser.add_argument(
        "--as",
        dest="as_queue",
        metavar="QUEUE",
        help=f"queue of the group jplay attaches to (default: {DEFAULT_SENDER_QUEUE})",
    )
    parser.add_argument("--to", metavar="QUEUE", help="send everything here, not to each target")
    parser.add_argument("--delivery", default="WF_DQF", help="WF_DQF (default), WF_SAF or WF_CONF")
    parser.add_argument(
        "--uma",
        default="DISC",
        help="undeliverable message action (default DISC: a failed replay is reported and "
        "the journal record stays)",
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds a put may wait (default 30)"
    )
    parser.add_argument("--rate", metavar="N/s", help="at most N messages per second")
    parser.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help=f"puts in flight, sent in batches of up to 512 (default {DEFAULT_WINDOW})",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would be sent; send nothing"
    )
    parser.add_argument(
        "--again", action="store_true", help="replay records already replayed (a new generation)"
    )
    parser.add_argument(
        "--remove",
        action="store_true",
        help="DLJ: remove each dead letter once its replay was acknowledged as stored",
    )
    parser.add_argument(
        "--json", action="store_true", help="the summary (or dry-run plan) as one JSON object"
    )
