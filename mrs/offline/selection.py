"""Which journal records an operator means: `mrs dump` and `mrs jplay` share this.

Why a module of its own: the same words (`--seq 5..9 --since 2h --target 'NYC.*'`)
must select the same records whether an operator is looking (dump) or acting
(jplay), so that "dump, check, then replay the same selection" is safe. Parsing is
pure and complete: every argument is checked and turned into a `RecordFilter`
before any journal is opened or any message sent, so a typo at 3 a.m. is an
error message, not a replay of the wrong hour.

Times select on the record's journal time: the confirm time for the PCJ, the time
written for the SAF, DQF and DLJ (the same rule as `journals.Selection`).
"""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from journals import Journal, Record
from mrs.config.bus import BusConfig
from mrs.offline.scalars import (
    INTEGER_PATTERN,
    WILDCARD_PATTERN,
    SelectionError,
    parse_bytes_pattern,
    parse_int_list,
    parse_int_range,
    parse_reason,
    parse_time_ns,
    whole_number,
)
from mrs.storage.journal_scan import record_time_ns

SEQ_MAX = (1 << 64) - 1
"""A journal key holds a seq in 64 bits: a larger --seq names no record."""


# ---------------------------------------------------------------------- addresses
@dataclass(frozen=True)
class QueueMatcher:
    """Matches (group, queue) against exact addresses and wildcard patterns.

    An exact address is resolved once, the way the server resolves it (`2.20`, `20`
    and `ORDERS` = a queue of the group being read, `NYC.ORDERS`). A pattern with
    `*`, `?` or `[...]` is matched (fnmatch, case-sensitive) against every way of
    writing an address: `G.Q`, `GROUPNAME.Q`, `G.QUEUENAME`, `GROUPNAME.QUEUENAME`,
    and for a queue of the group being read also `Q` and `QUEUENAME`.
    """

    exact: frozenset[tuple[int, int]]
    patterns: tuple[str, ...]
    spellings: Callable[[int, int], tuple[str, ...]]
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, group: int, queue: int) -> bool:
        key = (group, queue)
        hit = self._cache.get(key)
        if hit is None:
            hit = key in self.exact or any(
                fnmatch.fnmatchcase(spelling, pattern)
                for spelling in self.spellings(group, queue)
                for pattern in self.patterns
            )
            self._cache[key] = hit
        return hit


def queue_matcher(
    texts: Iterable[str], option: str, bus: BusConfig | None, group_id: int
) -> QueueMatcher:
    exact: set[tuple[int, int]] = set()
    patterns: list[str] = []
    for text in texts:
        cleaned = text.strip()
        if not cleaned:
            raise SelectionError(f"{option}: empty queue address")
        if WILDCARD_PATTERN.search(cleaned):
            patterns.append(cleaned)
            continue
        address = resolve_address(cleaned, bus, group_id, option)
        exact.add((address[0], address[1]))
    return QueueMatcher(frozenset(exact), tuple(patterns), _spellings(bus, group_id))


def resolve_address(
    text: str, bus: BusConfig | None, group_id: int, option: str
) -> tuple[int, int]:
    """'2.20', '20', 'ORDERS', 'NYC.ORDERS' -> (group, queue); names need a config."""
    if bus is not None:
        try:
            address = bus.resolve(text, group_id)
        except (LookupError, ValueError) as error:
            # args[0]: the message as written (str() of a KeyError adds quotes around it)
            problem = error.args[0] if error.args and isinstance(error.args[0], str) else error
            raise SelectionError(f"{option}: {problem}") from None
        return address.group, address.queue
    group_text, dot, queue_text = text.partition(".")
    if not dot and _is_number(group_text):
        if not group_id:  # `--data-dir` alone: whose queue 10 is it?
            raise SelectionError(
                f"{option}: {text!r} names a queue by number only: give --group N "
                "(the group whose journals these are) or write it GROUP.QUEUE"
            )
        group_text, queue_text = str(group_id), group_text
    if _is_number(group_text) and _is_number(queue_text):
        return whole_number(group_text, option), whole_number(queue_text, option)
    raise SelectionError(
        f"{option}: {text!r}: queue and group names need --config (or give GROUP.QUEUE numbers)"
    )


def _is_number(text: str) -> bool:
    """Digits 0-9 only. Why not isdigit() alone: it takes "²", which int() refuses, and
    `mrs dump --target ².10` ended as an unexpected error (exit 1, corrupt records)."""
    return text.isascii() and text.isdigit()


def _spellings(bus: BusConfig | None, group_id: int) -> Callable[[int, int], tuple[str, ...]]:
    def spellings(group: int, queue: int) -> tuple[str, ...]:
        group_names = [str(group)]
        queue_names = [str(queue)]
        if bus is not None and group in bus.groups:
            config = bus.groups[group]
            group_names.append(config.name)
            if queue in config.queues:
                queue_names.append(config.queues[queue].name)
            elif queue == 96:
                queue_names.append("DLQ")
        result = [f"{g}.{q}" for g in group_names for q in queue_names]
        if group == group_id:
            result.extend(queue_names)
        return tuple(result)

    return spellings


# ---------------------------------------------------------------------- the filter
@dataclass(frozen=True)
class RecordFilter:
    """A validated selection: `matches(record)` is the predicate; the seq bounds also
    let a scan of the DLJ/PCJ start at the right key instead of the first one."""

    journal: Journal
    seq_min: int | None = None
    seq_max: int | None = None
    time_min_ns: int | None = None
    time_max_ns: int | None = None
    targets: QueueMatcher | None = None
    sources: QueueMatcher | None = None
    classes: frozenset[int] | None = None
    types: frozenset[int] | None = None
    contains: tuple[bytes, ...] = ()
    not_contains: tuple[bytes, ...] = ()
    reasons: frozenset[int] | None = None
    confirm_min: int | None = None
    confirm_max: int | None = None
    limit: int | None = None
    _checks: tuple[Callable[[Record], bool], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_checks", tuple(self._build_checks()))

    def _build_checks(self) -> Iterable[Callable[[Record], bool]]:
        """Only the criteria given become checks, so an empty filter costs nothing."""
        if self.seq_min is not None:
            low = self.seq_min
            yield lambda r: r.seq >= low
        if self.seq_max is not None:
            high = self.seq_max
            yield lambda r: r.seq <= high
        if self.time_min_ns is not None:
            since = self.time_min_ns
            yield lambda r: record_time_ns(r) >= since
        if self.time_max_ns is not None:
            until = self.time_max_ns
            yield lambda r: record_time_ns(r) <= until
        if self.targets is not None:
            targets = self.targets
            yield lambda r: targets(r.target_group, r.target_queue)
        if self.sources is not None:
            sources = self.sources
            yield lambda r: sources(r.source_group, r.source_queue)
        if self.classes is not None:
            classes = self.classes
            yield lambda r: r.msg_class in classes
        if self.types is not None:
            types = self.types
            yield lambda r: r.msg_type in types
        for pattern in self.contains:
            yield lambda r, p=pattern: p in r.body
        for pattern in self.not_contains:
            yield lambda r, p=pattern: p not in r.body
        if self.reasons is not None:
            reasons = self.reasons
            yield lambda r: r.reason in reasons
        if self.confirm_min is not None:
            low_value = self.confirm_min
            yield lambda r: r.confirm_value >= low_value
        if self.confirm_max is not None:
            high_value = self.confirm_max
            yield lambda r: r.confirm_value <= high_value

    @property
    def selects_all(self) -> bool:
        """No criterion (a limit aside): scans can skip calling matches()."""
        return not self._checks

    def matches(self, record: Record) -> bool:
        return all(check(record) for check in self._checks)


# ---------------------------------------------------------------------- argparse
def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The selection options shared by `mrs dump` and `mrs jplay`."""
    group = parser.add_argument_group(
        "selection (all given criteria must hold; repeated options of one kind: any of them)"
    )
    group.add_argument("--seq", metavar="A..B", help="sequence numbers: 5..9, 5.., ..9 or 7")
    group.add_argument(
        "--since", metavar="TIME", help="at or after TIME: ISO (naive = local time) or 2h, 30m, 1d"
    )
    group.add_argument("--until", metavar="TIME", help="at or before TIME (same forms)")
    group.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="QUEUE",
        help="target queue: 1.10, ORDERS, NYC.ORDERS or a wildcard like '1.*', 'NYC.ORD*'",
    )
    group.add_argument("--source", action="append", default=[], metavar="QUEUE", help="sender")
    group.add_argument(
        "--class",
        dest="msg_class",
        action="append",
        default=[],
        metavar="N",
        help="only this message class (repeat or N,M,... for several; default: any)",
    )
    group.add_argument(
        "--type",
        dest="msg_type",
        action="append",
        default=[],
        metavar="N",
        help="only this message type (repeat or N,M,... for several; default: any)",
    )
    group.add_argument(
        "--contains",
        action="append",
        default=[],
        metavar="TEXT",
        help="body contains TEXT (UTF-8) or hex:0a1b..; several: all of them",
    )
    group.add_argument(
        "--not-contains", action="append", default=[], metavar="TEXT", help="body lacks TEXT"
    )
    group.add_argument(
        "--reason",
        action="append",
        default=[],
        metavar="STATUS",
        help="DLJ only: dead-letter reason, a name (NO_DQF) or number (-228)",
    )
    group.add_argument(
        "--confirm-value", metavar="N|A..B", help="PCJ only: confirmation value or range"
    )
    group.add_argument("--limit", metavar="N", help="at most N records (the first N selected)")


def filter_from_args(
    args: argparse.Namespace,
    journal: Journal,
    bus: BusConfig | None,
    group_id: int,
    now_ns: int,
) -> RecordFilter:
    """Validate every selection option; raises SelectionError naming the first problem."""
    seq_min = seq_max = None
    if args.seq is not None:
        seq_min, seq_max = parse_int_range(args.seq, "--seq", minimum=0, maximum=SEQ_MAX)
    time_min = parse_time_ns(args.since, now_ns, "--since") if args.since else None
    time_max = parse_time_ns(args.until, now_ns, "--until") if args.until else None
    if time_min is not None and time_max is not None and time_min > time_max:
        raise SelectionError(
            f"--since {args.since} is after --until {args.until}: nothing can match"
        )
    reasons = None
    if args.reason:
        if journal is not Journal.DLJ:
            raise SelectionError(
                f"--reason selects dead letters: it applies to the dlj, not the {journal}"
            )
        reasons = frozenset(parse_reason(text) for text in args.reason)
    confirm_min = confirm_max = None
    if args.confirm_value is not None:
        if journal is not Journal.PCJ:
            raise SelectionError(
                f"--confirm-value applies to the pcj (confirmed messages), not the {journal}"
            )
        confirm_min, confirm_max = parse_int_range(args.confirm_value, "--confirm-value")
    limit = None
    if args.limit is not None:
        if INTEGER_PATTERN.fullmatch(args.limit.strip()):
            limit = whole_number(args.limit, "--limit")
        if limit is None or limit < 1:
            raise SelectionError(f"--limit: {args.limit!r} is not a positive integer")
    return RecordFilter(
        journal=journal,
        seq_min=seq_min,
        seq_max=seq_max,
        time_min_ns=time_min,
        time_max_ns=time_max,
        targets=queue_matcher(args.target, "--target", bus, group_id) if args.target else None,
        sources=queue_matcher(args.source, "--source", bus, group_id) if args.source else None,
        classes=parse_int_list(args.msg_class, "--class") if args.msg_class else None,
        types=parse_int_list(args.msg_type, "--type") if args.msg_type else None,
        contains=tuple(parse_bytes_pattern(t, "--contains") for t in args.contains),
        not_contains=tuple(parse_bytes_pattern(t, "--not-contains") for t in args.not_contains),
        reasons=reasons,
        confirm_min=confirm_min,
        confirm_max=confirm_max,
        limit=limit,
    )
