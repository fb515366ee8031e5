"""The rules-table parser: text -> `RulesTable`, or every error with line and column.

Pure (no I/O). Follows runmqdlq's conventions: comments (`*` first), blank lines,
`+` (continue at the next line's first non-blank) and `-` (continue at its first
column) continuations, 72 significant columns, keywords in any order, case
insensitive, separated by blanks or commas, each at most once per rule, every
value with at least one significant character (`FORMAT(' ')` yes, `FORMAT('')` no).
A line beyond 72 columns is read whole with a warning (refused with `strict`); a
rule forwarding to the very DLQ the handler reads is refused (it would loop).
As runmqdlq does, the first error in an entry ends the checking of that entry, so
one mistake is reported once, not as a cascade.
"""

from __future__ import annotations

from dataclasses import dataclass

from mrs.config.schema import NAME_CHARS_MAX
from mrs.dlq.codes import NUMBER_ONLY_KEYWORDS, NUMERIC_KEYWORDS, number_for, reason_instead
from mrs.dlq.table import (
    ACTION_KEYWORDS,
    COLUMNS_SIGNIFICANT,
    CONTROL_KEYWORDS,
    DEAD_LETTER_QUEUE_NAMES,
    FORWARD_ONLY_KEYWORDS,
    FWDQ_VARIABLES,
    FWDQM_VARIABLES,
    INPUT_DEAD_LETTER_JOURNAL,
    PATTERN_KEYWORDS,
    RETRY_INTERVAL_S_DEFAULT,
    RETRY_MAX,
    WAIT_S_MAX,
    Action,
    Control,
    PutAuthority,
    Rule,
    RulesTable,
)
from mrs.errors import OperatorError
from mrs.limits import DLQ_MATCH_CHARS_MAX, DLQ_TABLE_BYTES_MAX

RULE_KEYWORDS = PATTERN_KEYWORDS + ACTION_KEYWORDS
ALL_KEYWORDS = RULE_KEYWORDS + CONTROL_KEYWORDS
NAMED_KEYWORDS = frozenset({"DESTQ", "DESTQM", "REPLYQ", "REPLYQM"})
"""Pattern keywords that also match a queue's or group's configured name, whole."""
ERRORS_MAX = 100
"""A table with more errors than this reports the first ERRORS_MAX."""
_BEYOND_ERROR = (
    f"text beyond column {COLUMNS_SIGNIFICANT}; continue the rule on the next line with '+' or '-'"
)
_BEYOND_WARNING = (
    f"warning: text beyond column {COLUMNS_SIGNIFICANT} read as part of the rule "
    "(runmqdlq keeps 72 columns for portability; --strict refuses such a line)"
)


@dataclass(frozen=True, slots=True)
class Problem:
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {self.message}"


class RulesError(OperatorError, ValueError):
    """The table is not valid; `problems` lists each error with its place (status
    BADPARAM: an operator's table, under the one root `mrs.errors.MrsError`)."""

    def __init__(self, problems: list[Problem], partial: RulesTable | None = None) -> None:
        self.problems = problems
        self.partial = partial
        """What did parse (the control data and the rules without an error), so a
        check against the bus reports its errors with these (`mrs dlq-handler --check`)."""
        super().__init__("\n".join(str(problem) for problem in problems))


SHOWN_CHARS_MAX = 60
"""An error quotes at most this many characters of a value or word: a 1 MiB token
(a base64 blob, a minified file named by mistake) made a 1 MiB error line."""


def shown(value: str) -> str:
    """`value` as an error quotes it: whole, or its start and '...' when long."""
    return value if len(value) <= SHOWN_CHARS_MAX else f"{value[: SHOWN_CHARS_MAX - 3]}..."


class _EntryError(Exception):
    def __init__(self, position: tuple[int, int], message: str) -> None:
        self.position = position
        self.message = message


@dataclass(slots=True)
class _Entry:
    """One logical entry (lines joined by continuations) and where each char came from."""

    text: str
    places: list[tuple[int, int]]
    end: tuple[int, int]

    def place(self, index: int) -> tuple[int, int]:
        return self.places[index] if index < len(self.places) else self.end


def decode_table(data: bytes) -> str:
    """The table's text from its bytes (a file's or standard input's, read with at most
    DLQ_TABLE_BYTES_MAX + 1 bytes): UTF-8, or RulesError naming where it is not (the line
    and column of the first bad byte), or that the table is too large."""
    if len(data) > DLQ_TABLE_BYTES_MAX:
        too_large = f"the table is larger than {DLQ_TABLE_BYTES_MAX} bytes (is it the right file?)"
        raise RulesError([Problem(1, 1, too_large)])
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte order mark (Notepad) is no error
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = data.count(b"\n", 0, error.start) + 1
        column = len(data[line_start : error.start].decode("utf-8", "replace")) + 1
        bad = data[error.start : error.end].hex(" ")
        raise RulesError(
            [Problem(line, column, f"byte {bad} is not UTF-8; save the table as UTF-8")]
        ) from None


def parse_table(text: str, strict: bool = False) -> RulesTable:
    """Parse a whole rules table; RulesError with every problem found. A line longer
    than 72 columns is read whole with a warning (`strict`: refused, as runmqdlq)."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    entries = _entries(text, problems, warnings if not strict else None)
    control = Control()
    rules: list[Rule] = []
    for index, entry in enumerate(entries):
        try:
            items = _items(entry)
            if index == 0 and items and items[0][0] in CONTROL_KEYWORDS:
                control = _control(items)
            else:
                rules.append(_rule(items, entry.place(0)[0]))
                warnings.extend(_matching_nothing(items))
        except _EntryError as error:
            problems.append(Problem(*error.position, error.message))
    if not rules and not problems:
        end_line = text.count("\n") + 1
        problems.append(Problem(end_line, 1, "the table has no rule (at least one is required)"))
    if (control.input_q or "").strip().upper() != INPUT_DEAD_LETTER_JOURNAL:
        problems.extend(_forwards_to_own_dlq(rules))
    warnings.sort(key=lambda warning: (warning.line, warning.column))
    table = RulesTable(control, tuple(rules), tuple(str(warning) for warning in warnings))
    if problems:
        problems.sort(key=lambda problem: (problem.line, problem.column))
        raise RulesError(problems[:ERRORS_MAX], table)
    return table


def _forwards_to_own_dlq(rules: list[Rule]) -> list[Problem]:
    """A rule that forwards to the DLQ the handler reads would take every message it
    forwards again, for ever: refused (FWDQM naming this group is checked against
    the bus, `mrs.dlq.actions.target_problems`)."""
    return [
        Problem(*rule.fwd_place, forwards_to_own_dlq(rule))
        for rule in rules
        if rule.action is Action.FWD
        and (rule.fwd_q or "").strip().upper() in DEAD_LETTER_QUEUE_NAMES
        and not (rule.fwd_qm or "").strip()
    ]


def forwards_to_own_dlq(rule: Rule) -> str:
    named = f"FWDQ({shown(rule.fwd_q or '')})" + (
        f" FWDQM({shown(rule.fwd_qm)})" if rule.fwd_qm else ""
    )
    return (
        f"{named} is the dead-letter queue this handler reads: every message it forwards "
        "would come back to it (a loop)"
    )


# ---------------------------------------------------------------------- lines -> entries
def _entries(text: str, problems: list[Problem], warnings: list[Problem] | None) -> list[_Entry]:
    """Logical entries; a line beyond 72 columns is a problem, or with `warnings`
    given a warning, and the line is read whole."""
    entries: list[_Entry] = []
    chars: list[str] = []
    places: list[tuple[int, int]] = []
    continuing: str | bool = False
    continued_at = 0
    broken = False
    lines = text.split("\n")
    if len(lines) > 1 and not lines[-1]:
        # The newline that ends the last line starts no line of its own: read as a
        # blank one, it ended a rule whose last line ends with '+' or '-' (a table
        # cut short) as if it were complete, and only when the file ends in one.
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        stripped = line.rstrip()
        if stripped.lstrip().startswith("*"):
            continue  # comment lines "can occur anywhere", inside a continued rule too
        if not continuing and not stripped.strip():
            continue  # a blank line ends a continued rule (a trailing '+' forgiven)
        if len(stripped) > COLUMNS_SIGNIFICANT and warnings is not None:
            warnings.append(Problem(number, COLUMNS_SIGNIFICANT + 1, _BEYOND_WARNING))
        elif len(stripped) > COLUMNS_SIGNIFICANT:
            problems.append(Problem(number, COLUMNS_SIGNIFICANT + 1, _BEYOND_ERROR))
            stripped = stripped[:COLUMNS_SIGNIFICANT].rstrip()
            broken = True
        start = 0
        if continuing == "+":
            start = len(stripped) - len(stripped.lstrip())
        marker = stripped[-1:] if stripped else ""
        end = len(stripped) - 1 if marker in ("+", "-") else len(stripped)
        for column in range(start, end):
            chars.append(stripped[column])
            places.append((number, column + 1))
        if marker in ("+", "-"):
            continuing, continued_at = marker, number
            continue
        continuing = False
        if not broken:  # an entry with an error is reported once, not re-checked
            entries.append(_Entry("".join(chars), places, (number, len(stripped) + 1)))
        chars, places, broken = [], [], False
    if continuing:
        # at the line whose '+' or '-' continues into nothing (comments may follow it)
        problems.append(Problem(continued_at, 1, "the table ends inside a continued rule"))
    return entries


# ---------------------------------------------------------------------- entry -> items
def _items(entry: _Entry) -> list[tuple[str, str, tuple[int, int]]]:
    """(KEYWORD, value, place of the keyword) for each item of an entry."""
    text = entry.text
    items: list[tuple[str, str, tuple[int, int]]] = []
    seen: set[str] = set()
    index = 0
    while True:
        while index < len(text) and text[index] in " ,\t":
            index += 1
        if index >= len(text):
            return items
        start = index
        while index < len(text) and (text[index].isalnum() or text[index] == "_"):
            index += 1
        word = text[start:index].upper()
        place = entry.place(start)
        if not word:
            raise _EntryError(place, f"expected a keyword, found {text[start]!r}")
        if word not in ALL_KEYWORDS:
            raise _EntryError(place, f"unknown keyword {shown(word)}")
        if word in seen:
            raise _EntryError(place, f"keyword {word} given twice in one rule")
        seen.add(word)
        while index < len(text) and text[index] in " \t":
            index += 1
        if index >= len(text) or text[index] != "(":
            raise _EntryError(place, f"keyword {word} needs a value in parentheses")
        value, index = _value(entry, word, index + 1)
        items.append((word, value, place))


def _value(entry: _Entry, word: str, index: int) -> tuple[str, int]:
    """The value after `(`; returns it and the index after `)`."""
    text = entry.text
    while index < len(text) and text[index] in " \t":
        index += 1
    if index < len(text) and text[index] == "'":
        opening = index
        chars: list[str] = []
        index += 1
        while True:
            if index >= len(text):
                raise _EntryError(entry.place(opening), f"{word}: quoted value not closed")
            if text[index] == "'":
                if text[index + 1 : index + 2] == "'":
                    chars.append("'")
                    index += 2
                    continue
                index += 1
                break
            chars.append(text[index])
            index += 1
        value = "".join(chars)
        if not value:
            raise _EntryError(
                entry.place(opening),
                f"{word}(''): a value needs at least one character (write ' ' for blank)",
            )
    else:
        start = index
        while index < len(text) and text[index] not in ") \t,('":
            index += 1
        value = text[start:index]
        if not value:
            raise _EntryError(
                entry.place(start), f"{word}(): a value needs at least one significant character"
            )
    while index < len(text) and text[index] in " \t":
        index += 1
    if index >= len(text) or text[index] != ")":
        raise _EntryError(entry.place(index), f"{word}: expected ')' after the value")
    return value, index + 1


# ---------------------------------------------------------------------- items -> meaning
def _control(items: list[tuple[str, str, tuple[int, int]]]) -> Control:
    values: dict[str, str | int | None] = {}
    for word, value, place in items:
        if word not in CONTROL_KEYWORDS:
            raise _EntryError(
                place,
                f"{word} cannot be in the control data (the first entry holds only "
                "INPUTQ, INPUTQM, RETRYINT, WAIT)",
            )
        if word in ("INPUTQ", "INPUTQM"):
            values[word] = value
        elif word == "RETRYINT":
            values[word] = _number(value, place, word, 0, RETRY_MAX)
        else:
            upper = value.upper()
            if upper == "YES":
                values[word] = None
            elif upper == "NO":
                values[word] = 0
            else:
                values[word] = _number(value, place, word, 0, WAIT_S_MAX, "YES, NO or ")
    return Control(
        input_q=values.get("INPUTQ"),
        input_qm=values.get("INPUTQM"),
        retry_interval_s=values.get("RETRYINT", RETRY_INTERVAL_S_DEFAULT),
        wait_s=values.get("WAIT"),
        given=tuple(word for word in CONTROL_KEYWORDS if word in values),
    )


def _rule(items: list[tuple[str, str, tuple[int, int]]], line: int) -> Rule:
    given = {word: (value, place) for word, value, place in items}
    for word, (_, place) in given.items():
        if word in CONTROL_KEYWORDS:
            raise _EntryError(
                place,
                f"{word} belongs in the control data, the first entry: one entry, so "
                "write it on the first entry's line or end that line with '+' to continue it",
            )
    if "ACTION" not in given:
        place = items[0][2] if items else (line, 1)
        raise _EntryError(place, "the rule has no ACTION (DISCARD, IGNORE, RETRY or FWD)")
    value, place = given["ACTION"]
    try:
        action = Action(value.upper())
    except ValueError:
        raise _EntryError(
            place, f"ACTION({shown(value)}): must be DISCARD, IGNORE, RETRY or FWD"
        ) from None
    if action is not Action.FWD:
        for word in FORWARD_ONLY_KEYWORDS:
            if word in given:
                raise _EntryError(given[word][1], f"{word} is only valid with ACTION(FWD)")
    elif "FWDQ" not in given:
        raise _EntryError(place, "ACTION(FWD) needs FWDQ")
    patterns = []
    for word in PATTERN_KEYWORDS:
        if word in given:
            value, where = given[word]
            _check_pattern(word, value, where)
            patterns.append((word, value))
    fwd_q = _forward_queue(given, "FWDQ", FWDQ_VARIABLES, blank_ok=False)
    fwd_qm = _forward_queue(given, "FWDQM", FWDQM_VARIABLES, blank_ok=True)
    header = _choice(given, "HEADER", {"YES": True, "NO": False}, True)
    authority = _choice(
        given, "PUTAUT", {"DEF": PutAuthority.DEF, "CTX": PutAuthority.CTX}, PutAuthority.DEF
    )
    retry = 1
    if "RETRY" in given:
        retry = _number(*given["RETRY"], "RETRY", 1, RETRY_MAX)
    return Rule(
        patterns=tuple(patterns),
        action=action,
        fwd_q=fwd_q,
        fwd_qm=fwd_qm,
        header=header,
        put_authority=authority,
        retry=retry,
        given=tuple(word for word in ACTION_KEYWORDS[1:] if word in given),
        line=line,
        fwd_place=given["FWDQ"][1] if "FWDQ" in given else (line, 1),
    )


def _check_pattern(word: str, value: str, place: tuple[int, int]) -> None:
    wild = any(c in value for c in "*?")
    if word == "REASON" and not wild and (instead := reason_instead(value)) is not None:
        raise _EntryError(place, f"REASON({shown(value)}): {instead}")
    if word in NUMERIC_KEYWORDS and not wild and number_for(word, value) is None:
        raise _EntryError(place, f"{word}({shown(value)}): not a number or a known {word} name")
    if word == "PERSIST" and not wild and number_for(word, value) not in (0, 1):
        raise _EntryError(
            place,
            f"PERSIST({shown(value)}): a dead letter is 0 (MQPER_NOT_PERSISTENT) or 1 "
            "(MQPER_PERSISTENT), so this matches nothing (MQPER_PERSISTENCE_AS_Q_DEF is "
            "settled when a message is put, never carried by one)",
        )


def _too_long(word: str, value: str) -> str | None:
    """Why a pattern is longer than any value it is matched against, or None. Each
    value is cut to its MQ field before matching (`mrs.limits.DLQ_MATCH_CHARS_MAX`:
    USERID 12, APPLIDAT 32, ...), and a queue or group keyword also sees the configured
    name (up to `NAME_CHARS_MAX`): `USERID(administrator)` took nothing, silently,
    even from a letter whose user_id was exactly that."""
    chars_max = DLQ_MATCH_CHARS_MAX[word]
    if word in NAMED_KEYWORDS:
        chars_max = max(chars_max, NAME_CHARS_MAX)
    fixed = len(value.rstrip().replace("*", ""))  # '?' is one character, '*' none
    if word in NUMERIC_KEYWORDS or fixed <= chars_max:
        return None
    return (
        f"warning: {word}({shown(value)}) matches nothing: {fixed} characters, but {word} "
        f"matches values of at most {chars_max} (longer ones are cut); write at most "
        f"{chars_max} (e.g. the first {chars_max} followed by *)"
    )


def _matching_nothing(items: list[tuple[str, str, tuple[int, int]]]) -> list[Problem]:
    """A warning for each pattern that can match nothing: REASON, FEEDBACK, MSGTYPE and
    PERSIST are numbers in every dead letter, so `REASON(MQRC_Q_*)` (a letter in it) is valid
    and takes nothing; a pattern longer than its value can be (`_too_long`) too. The
    rule is kept, the operator told (on stderr, by the handler and by --check)."""
    too_long = [
        Problem(*place, why)
        for word, value, place in items
        if word in PATTERN_KEYWORDS and (why := _too_long(word, value)) is not None
    ]
    return too_long + [
        Problem(
            *place,
            f"warning: {word}({shown(value)}) matches nothing: a wildcard is matched against the "
            "number (as in REASON(20?5)), and a name cannot take one",
        )
        for word, value, place in items
        if word in NUMBER_ONLY_KEYWORDS
        and any(c in value for c in "*?")
        and not set(value) <= set("0123456789+-*? ")
    ]


def _forward_queue(
    given: dict, word: str, variables: tuple[str, ...], blank_ok: bool
) -> str | None:
    if word not in given:
        return None
    value, place = given[word]
    if value.startswith("&"):
        if value.upper() not in variables:
            raise _EntryError(
                place, f"{word}({shown(value)}): the variables here are {' and '.join(variables)}"
            )
        return value.upper()
    if not value.strip():
        if not blank_ok:
            raise _EntryError(place, f"{word}(' '): a queue name is required")
        return value
    if any(c in value for c in "*?"):
        raise _EntryError(place, f"{word}({shown(value)}): no wildcards in a queue to forward to")
    return value


def _choice(given: dict, word: str, choices: dict, default):
    if word not in given:
        return default
    value, place = given[word]
    try:
        return choices[value.upper()]
    except KeyError:
        must = f"{word}({shown(value)}): must be {' or '.join(choices)}"
        raise _EntryError(place, must) from None


def _number(
    value: str, place: tuple[int, int], word: str, low: int, high: int, other: str = ""
) -> int:
    """`value` as a whole number in low..high, or the entry's one-line error naming
    the value (its length, when it is too long to show) and what `word` also takes."""
    text = value if len(value) <= 24 else f"{len(value)} digits"
    if not value.isdigit() or not value.isascii():
        raise _EntryError(place, f"{word}({text}): must be {other}a whole number")
    if len(value.lstrip("0")) > len(str(high)) or not low <= int(value) <= high:
        # the length first: int() of thousands of digits raises
        raise _EntryError(place, f"{word}({text}): must be {other}a whole number in {low}..{high}")
    return int(value)
