"""Rule patterns against a dead letter: what each pattern keyword looks at, and `*`/`?`.

MRS is not IBM MQ, so each keyword is mapped to the closest thing an MRS dead letter
carries (docs/dlq-handler.md has the table): the dead-letter header for REASON,
DESTQ, DESTQM, FORMAT, APPLNAME, APPLTYPE; the message for MSGTYPE, PERSIST,
APPLIDAT (correlation id), REPLYQ/REPLYQM (response queue, else the sender);
FEEDBACK is MessageQ's own status for the refusal; USERID a `user_id` header.
Queue and group keywords match the number or the configured name. Each value is cut
to the length of the MQ field it stands for (`mrs.limits.DLQ_MATCH_CHARS_MAX`) and
globs are matched without backtracking: a sender chooses some of these values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mrs.dlq.codes import NUMERIC_KEYWORDS, number_for
from mrs.dlq.table import Rule
from mrs.limits import DLQ_MATCH_CHARS_MAX

Names = Callable[[int, int | None], str | None]
"""(group, queue or None) -> the configured name of that queue (or group), if any."""


@dataclass(frozen=True, slots=True)
class Letter:
    """What the handler knows of one message on the DLQ (no I/O, no client types)."""

    seq: int
    header: Mapping | None
    source: tuple[int, int]
    msg_type: int = 0
    recoverable: bool = False
    correlation_id: bytes = b""
    headers: Mapping | None = None
    reply_to: tuple[int, int] | None = None
    returns: int = 0
    """How often the handler has already put this message back out of a DLQ."""


def _no_names(_group: int, _queue: int | None) -> str | None:
    return None


def _int_or_none(text: object) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        return None


def letter_values(letter: Letter, names: Names = _no_names) -> dict[str, tuple[str, ...]]:
    """Each pattern keyword -> the texts a pattern may match (number and/or name)."""
    header = letter.header or {}
    dest_group = _int_or_none(header.get("dest_q_mgr_name"))
    dest_queue = _int_or_none(header.get("dest_q_name"))
    reply_group, reply_queue = letter.reply_to or letter.source
    extra = letter.headers or {}

    def queue_texts(group: int | None, queue: int | None, raw: object) -> tuple[str, ...]:
        texts = [str(raw if raw is not None else "")]
        if group is not None and queue is not None and (name := names(group, queue)):
            texts.append(name)
        return tuple(texts)

    def group_texts(group: int | None, raw: object) -> tuple[str, ...]:
        texts = [str(raw if raw is not None else "")]
        if group is not None and (name := names(group, None)):
            texts.append(name)
        return tuple(texts)

    feedback = header.get("feedback", header.get("mrs_status", ""))
    values = {
        "APPLIDAT": (letter.correlation_id.rstrip(b"\0").decode("latin-1"),),
        "APPLNAME": (str(header.get("put_appl_name", "")),),
        "APPLTYPE": (str(header.get("put_appl_type", "")),),
        "DESTQ": queue_texts(dest_group, dest_queue, header.get("dest_q_name")),
        "DESTQM": group_texts(dest_group, header.get("dest_q_mgr_name")),
        "FEEDBACK": (str(feedback),),
        "FORMAT": (str(header.get("format", "")),),
        "MSGTYPE": (str(letter.msg_type),),
        "PERSIST": ("1" if letter.recoverable else "0",),
        "REASON": (str(header.get("reason", "")),),
        "REPLYQ": queue_texts(reply_group, reply_queue, reply_queue),
        "REPLYQM": group_texts(reply_group, reply_group),
        "USERID": (str(extra.get("user_id", "")),),
    }
    return {
        keyword: tuple(text[: DLQ_MATCH_CHARS_MAX[keyword]] for text in texts)
        for keyword, texts in values.items()
    }


def _segment_at(segment: str, text: str, start: int) -> bool:
    """`segment` (`?` = any one character, no `*`) matches text at `start`."""
    if start + len(segment) > len(text):
        return False
    return all(c == "?" or c == text[start + i] for i, c in enumerate(segment))


def _find_segment(segment: str, text: str, start: int, end: int) -> int:
    """The leftmost place in text[start:end] where `segment` matches, or -1."""
    if "?" not in segment:
        return text.find(segment, start, end)
    for place in range(start, end - len(segment) + 1):
        if _segment_at(segment, text, place):
            return place
    return -1


def glob_matches(pattern: str, text: str) -> bool:
    """`*` (any run) and `?` (one character) against the whole text, without
    backtracking: the pieces between stars are found leftmost, in order, which is
    enough for a glob, so a value any sender chooses costs at most
    len(text) x len(pattern) steps, never an exponential search."""
    pieces = pattern.split("*")
    if len(pieces) == 1:
        return len(text) == len(pattern) and _segment_at(pattern, text, 0)
    first, last, middle = pieces[0], pieces[-1], pieces[1:-1]
    end = len(text) - len(last)
    if end < len(first) or not _segment_at(first, text, 0) or not _segment_at(last, text, end):
        return False
    place = len(first)
    for segment in middle:
        if not segment:
            continue
        found = _find_segment(segment, text, place, end)
        if found < 0:
            return False
        place = found + len(segment)
    return True


def value_matches(keyword: str, pattern: str, texts: tuple[str, ...]) -> bool:
    """One keyword's pattern against the texts of a letter (trailing blanks ignored)."""
    if pattern == "*":
        return True
    if keyword in NUMERIC_KEYWORDS and not any(c in pattern for c in "*?"):
        number = number_for(keyword, pattern)
        return any(_int_or_none(text) == number for text in texts)
    wanted = pattern.rstrip()
    return any(glob_matches(wanted, text.rstrip()) for text in texts)


def rule_matches(rule: Rule, values: dict[str, tuple[str, ...]]) -> bool:
    return all(value_matches(k, pattern, values[k]) for k, pattern in rule.patterns)
