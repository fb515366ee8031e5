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
from mrs.model import REPLY_QUEUE_HEADER

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


def _cut(keyword: str, texts: tuple[str, ...], named: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The texts a pattern sees: what the letter carries cut to its MQ field's length
    (a sender chooses it), and the configured names of its queue or group whole (the
    bus config bounds them, and they may be longer than MQ's 48: cut, a rule naming
    such a queue would never match it)."""
    return tuple(text[: DLQ_MATCH_CHARS_MAX[keyword]] for text in texts) + named


def _named(names: Names, group: int | None, queue: int | None = None) -> tuple[str, ...]:
    """The configured name of a queue (or, without `queue`, of a group), if any."""
    if group is None:
        return ()
    name = names(group, queue) if queue is not None else names(group, None)
    return (name,) if name else ()


def _reply_texts(letter: Letter, names: Names) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(REPLYQ texts, REPLYQM texts): the message's `reply_q` header in any form the
    bus takes ("1.16", "NYC.SENDER2", "SENDER2": in the sender's group), else its
    sender, numbers and names.
    `&REPLYQ`/`&REPLYQM` forward to the same header, so the pattern must look at it
    too: matched against the sender, a rule took letters by one queue and forwarded
    them to another."""
    reply_q = (letter.headers or {}).get(REPLY_QUEUE_HEADER)  # as mrs.dlq.actions' target
    if letter.reply_to is None and reply_q:
        group_text, _, queue_text = str(reply_q).rpartition(".")
        group_text = group_text or str(letter.source[0])  # MQ: blank = the putter's
        group, queue = _int_or_none(group_text), _int_or_none(queue_text)
        queue_names = _named(names, group, queue) if queue is not None else ()
        return (
            _cut("REPLYQ", (queue_text,), queue_names),
            _cut("REPLYQM", (group_text,), _named(names, group)),
        )
    group, queue = letter.reply_to or letter.source
    return (
        _cut("REPLYQ", (str(queue),), _named(names, group, queue)),
        _cut("REPLYQM", (str(group),), _named(names, group)),
    )


def letter_values(letter: Letter, names: Names = _no_names) -> dict[str, tuple[str, ...]]:
    """Each pattern keyword -> the texts a pattern may match (number and/or name)."""
    header = letter.header or {}
    dest_group = _int_or_none(header.get("dest_q_mgr_name"))
    dest_queue = _int_or_none(header.get("dest_q_name"))
    extra = letter.headers or {}
    dest_q = "" if header.get("dest_q_name") is None else str(header["dest_q_name"])
    dest_qm = "" if header.get("dest_q_mgr_name") is None else str(header["dest_q_mgr_name"])
    dest_q_names = _named(names, dest_group, dest_queue) if dest_queue is not None else ()
    reply_queue_texts, reply_group_texts = _reply_texts(letter, names)
    feedback = header.get("feedback", header.get("mrs_status", ""))
    values = {
        "APPLIDAT": (letter.correlation_id.rstrip(b"\0").decode("latin-1"),),
        "APPLNAME": (str(header.get("put_appl_name", "")),),
        "APPLTYPE": (str(header.get("put_appl_type", "")),),
        "FEEDBACK": (str(feedback),),
        "FORMAT": (str(header.get("format", "")),),
        "MSGTYPE": (str(letter.msg_type),),
        "PERSIST": ("1" if letter.recoverable else "0",),
        "REASON": (str(header.get("reason", "")),),
        "USERID": (str(extra.get("user_id", "")),),
    }
    cut = {keyword: _cut(keyword, texts) for keyword, texts in values.items()}
    return {
        **cut,
        "DESTQ": _cut("DESTQ", (dest_q,), dest_q_names),
        "DESTQM": _cut("DESTQM", (dest_qm,), _named(names, dest_group)),
        "REPLYQ": reply_queue_texts,
        "REPLYQM": reply_group_texts,
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
