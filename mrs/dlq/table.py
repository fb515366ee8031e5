"""The rules table as data: control data, rules, and the canonical printer.

Mirrors runmqdlq's rules table (`shared/reference/runmqdlq-rules-grammar.md`). The
parser (`mrs.dlq.parser`) builds these; the printer writes them back as text the
parser reads into an equal table, within the 72-column rule (but for a run of `*`
longer than a line, which no continuation can start), so a table can be normalised,
generated and round-tripped.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

COLUMNS_SIGNIFICANT = 72
"""runmqdlq's significant columns "for portability": the printer keeps within them; a
longer line is read whole with a warning, and refused only under `--strict`."""
RETRY_MAX = 999_999_999
RETRY_INTERVAL_S_DEFAULT = 60
WAIT_S_MAX = 999_999_999

PATTERN_KEYWORDS = (
    "APPLIDAT",
    "APPLNAME",
    "APPLTYPE",
    "DESTQ",
    "DESTQM",
    "FEEDBACK",
    "FORMAT",
    "MSGTYPE",
    "PERSIST",
    "REASON",
    "REPLYQ",
    "REPLYQM",
    "USERID",
)
ACTION_KEYWORDS = ("ACTION", "FWDQ", "FWDQM", "HEADER", "PUTAUT", "RETRY")
CONTROL_KEYWORDS = ("INPUTQ", "INPUTQM", "RETRYINT", "WAIT")
FORWARD_ONLY_KEYWORDS = ("FWDQ", "FWDQM", "HEADER", "PUTAUT")

DEAD_LETTER_QUEUE_NAMES = (
    "DLQ",
    "96",
    "PAMS_DEAD_LETTER_QUEUE",
    "DEAD_LETTER_QUEUE",
    "SYSTEM.DEAD.LETTER.QUEUE",
)
"""What names a group's own DLQ in INPUTQ, and in FWDQ with a blank FWDQM, compared
upper-cased: MessageQ's names for it (`dead_letter_queue` too, as the group takes it,
mrs.config.schema) and IBM MQ's."""
INPUT_DEAD_LETTER_JOURNAL = "DLJ"

FWDQ_VARIABLES = ("&DESTQ", "&REPLYQ")
FWDQM_VARIABLES = ("&DESTQM", "&REPLYQM")


class Action(enum.StrEnum):
    DISCARD = "DISCARD"
    IGNORE = "IGNORE"
    RETRY = "RETRY"
    FWD = "FWD"


class PutAuthority(enum.StrEnum):
    DEF = "DEF"
    """Put with the handler's own identity."""
    CTX = "CTX"
    """Put with the message's own context (its original source)."""


@dataclass(frozen=True, slots=True)
class Control:
    """The optional first entry: where to read and how long to keep going."""

    input_q: str | None = None
    """INPUTQ: None (not given) or ' ' mean the group's dead-letter queue."""
    input_qm: str | None = None
    retry_interval_s: int = RETRY_INTERVAL_S_DEFAULT
    wait_s: int | None = None
    """WAIT: None = YES (forever), 0 = NO, n = end after n idle seconds."""
    given: tuple[str, ...] = ()
    """The keywords the table actually wrote (so the printer writes just those)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: patterns (keyword -> value, `*`/`?` wildcards) and an action."""

    patterns: tuple[tuple[str, str], ...]
    action: Action
    fwd_q: str | None = None
    fwd_qm: str | None = None
    header: bool = True
    put_authority: PutAuthority = PutAuthority.DEF
    retry: int = 1
    given: tuple[str, ...] = ()
    """Action keywords the table wrote explicitly (defaults stay unwritten)."""
    line: int = field(default=0, compare=False)
    """The line the rule starts on (for reports); not part of the rule's meaning."""
    fwd_place: tuple[int, int] = field(default=(0, 0), compare=False)
    """(line, column) of FWDQ, so a check against the bus can point at it."""

    def pattern(self, keyword: str) -> str:
        return dict(self.patterns).get(keyword, "*")


@dataclass(frozen=True, slots=True)
class RulesTable:
    control: Control
    rules: tuple[Rule, ...]
    warnings: tuple[str, ...] = field(default=(), compare=False)
    """"line L, column C: ..." for what was accepted but is not portable."""

    @property
    def reads_dead_letter_journal(self) -> bool:
        return (self.control.input_q or "").strip().upper() == INPUT_DEAD_LETTER_JOURNAL


# ---------------------------------------------------------------------- printing
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.*?%/$#@:&-]+")


def quote(value: str) -> str:
    """A value as the table writes it: bare when it can be, else in single quotes."""
    if _PLAIN_VALUE.fullmatch(value):
        return value
    return "'" + value.replace("'", "''") + "'"


def rule_keywords(rule: Rule) -> list[str]:
    """The rule as `KEYWORD(value)` items, in a fixed order."""
    items = [f"{keyword}({quote(value)})" for keyword, value in rule.patterns]
    items.append(f"ACTION({rule.action.value})")
    if "FWDQ" in rule.given or rule.fwd_q is not None:
        items.append(f"FWDQ({quote(rule.fwd_q or '')})")
    if "FWDQM" in rule.given or rule.fwd_qm is not None:
        items.append(f"FWDQM({quote(rule.fwd_qm or ' ')})")
    if "HEADER" in rule.given:
        items.append(f"HEADER({'YES' if rule.header else 'NO'})")
    if "PUTAUT" in rule.given:
        items.append(f"PUTAUT({rule.put_authority.value})")
    if "RETRY" in rule.given:
        items.append(f"RETRY({rule.retry})")
    return items


def control_keywords(control: Control) -> list[str]:
    items = []
    if "INPUTQ" in control.given:
        items.append(f"INPUTQ({quote(control.input_q or ' ')})")
    if "INPUTQM" in control.given:
        items.append(f"INPUTQM({quote(control.input_qm or ' ')})")
    if "RETRYINT" in control.given:
        items.append(f"RETRYINT({control.retry_interval_s})")
    if "WAIT" in control.given:
        wait = {None: "YES", 0: "NO"}.get(control.wait_s, str(control.wait_s))
        items.append(f"WAIT({wait})")
    return items


def _split_point(item: str) -> int | None:
    """Where to cut a long item for a '-' continuation: at most 71 characters before
    the '-', and never where the next line would begin (after blanks) with '*': the
    parser reads such a line as a comment, wherever it is (a pattern `A*B` cut
    before its '*' lost the rest of the rule). None when no cut works (a run of '*'
    longer than a line): the item is then written whole, past column 72."""
    for cut in range(COLUMNS_SIGNIFICANT - 1, 0, -1):
        if not item[cut:].lstrip().startswith("*"):
            return cut
    return None


def _lines(items: list[str]) -> list[str]:
    """Lay items out in lines of at most 72 columns, joined by '+' continuations.
    An item longer than a line is split with '-' (continue from column 1)."""
    lines: list[str] = []
    current = ""
    width = COLUMNS_SIGNIFICANT - 2  # room for " +"
    for item in items:
        candidate = f"{current} {item}" if current else item
        if len(candidate) <= width:
            current = candidate
            continue
        if current:
            lines.append(current + " +")
        while len(item) > width and (cut := _split_point(item)) is not None:
            # '-' continues with the next line from its first column: exact split.
            lines.append(item[:cut] + "-")
            item = item[cut:]
        current = item
    lines.append(current)
    return lines


def print_table(table: RulesTable) -> str:
    """The canonical text of a table; parsing it gives an equal table."""
    out: list[str] = []
    control = control_keywords(table.control)
    if control:
        out.extend(_lines(control))
    for rule in table.rules:
        out.extend(_lines(rule_keywords(rule)))
    return "\n".join(out) + "\n"
