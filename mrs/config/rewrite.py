"""Run-time changes written back to the bus TOML: a queue's limits, a new queue.

Why text edits and not a TOML writer: the operator's file keeps its comments, order
and layout; only the lines of the one queue changed (or the new queue's table) are
touched. Each edit is then checked against the TOML document itself: the new text
must read as the old one with exactly the one change (a table header written in a
form the line scan does not know, `[[group . queue]]`, once put a limit into another
queue, and the file still parsed). The result is parsed with the real parser
(mrs.config.bus.parse_config) before anything is written, so a bad value is refused
with the parser's one line, and the file is replaced atomically (a temporary file in
the same directory, fsync'd, renamed over it): a server starting meanwhile reads the
old or the new file, never half of one, and a restart keeps the change.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrs.storage.atomic_file import replace_file

_HEADER = re.compile(r"^\ufeff?\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$")
_ID = re.compile(r"^\s*id\s*=\s*([0-9]+)\s*(#.*)?$")
_COMMENT = re.compile(r"^\s*#")


@dataclass
class _Table:
    """One table of the file: its header's name, its lines [start, end), its id."""

    name: str
    start: int
    end: int
    table_id: int | None


def _tables(lines: list[str]) -> list[_Table]:
    tables: list[_Table] = []
    for number, line in enumerate(lines):
        match = _HEADER.match(line)
        if match:
            if tables:
                tables[-1].end = number
            tables.append(_Table(match.group(2), number, len(lines), None))
        elif tables and tables[-1].table_id is None and (found := _ID.match(line)):
            tables[-1].table_id = int(found.group(1))
    return tables


def _group_span(tables: list[_Table], group_id: int) -> tuple[int, int]:
    """The tables (indexes, end exclusive) of group `group_id`: its [[group]] table and
    the group.* tables after it."""
    for index, table in enumerate(tables):
        if table.name == "group" and table.table_id == group_id:
            end = index + 1
            while end < len(tables) and tables[end].name.startswith("group."):
                end += 1
            return index, end
    raise LookupError(f"no [[group]] with id = {group_id} in the file")


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n"}
_TOML_ESCAPES |= {"\f": "\\f", "\r": "\\r"}


def _value(value: object) -> str:
    """`value` written as TOML of its own type, so the parser's refusal of a wrong one
    names it. Why: anything not a bool or an int was written as a string, and a limit
    of 1.5 (or [5]) from the web page was refused as "got string '1.5'"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # a float as TOML reads it back: 1.5, 1e+300, inf, nan
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_toml_string(str(key))} = {_value(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    if value is None:
        raise ValueError("null has no form in a TOML file")
    return _toml_string(str(value))


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string: other characters as they are (the file is
    UTF-8), control characters escaped. Why not json.dumps: it wrote a character past
    U+FFFF (an emoji in a queue name) as two surrogate escapes, which TOML refuses,
    so the rewritten file did not parse. A lone surrogate has no UTF-8 form at all:
    ValueError (the caller's one-line refusal)."""
    written: list[str] = []
    for char in text:
        code = ord(char)
        if char in _TOML_ESCAPES:
            written.append(_TOML_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            written.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"{text!r} holds a lone surrogate, which a TOML file cannot")
        else:
            written.append(char)
    return '"' + "".join(written) + '"'


def with_queue_values(text: str, group_id: int, queue_id: int, values: dict[str, object]) -> str:
    """`text` with `key = value` set in the [[group.queue]] of `queue_id` in group
    `group_id` (a line replaced, keeping its comment, or added after its `id` line).
    LookupError when the group or queue is not found, or the edit would not be
    exactly that change (`_checked`)."""
    lines = text.splitlines(keepends=True)
    tables = _tables(lines)
    first, end = _group_span(tables, group_id)
    for table in tables[first:end]:
        if table.name == "group.queue" and table.table_id == queue_id:
            break
    else:
        raise LookupError(f"queue {queue_id} is not declared in group {group_id}'s tables")
    body = lines[table.start + 1 : table.end]
    newline = _newline(lines)
    for key, value in values.items():
        pattern = re.compile(rf"^(\s*{re.escape(key)}\s*=\s*)[^#]*?(\s*#.*)?$")
        for index, existing in enumerate(body):
            if match := pattern.match(existing.rstrip("\r\n")):
                body[index] = f"{match.group(1)}{_value(value)}{match.group(2) or ''}{newline}"
                break
        else:
            at = next((i + 1 for i, one in enumerate(body) if _ID.match(one)), 0)
            body.insert(at, f"{key} = {_value(value)}{newline}")
    after = "".join(lines[: table.start + 1] + body + lines[table.end :])

    def expected(document: dict[str, Any]) -> None:
        _queue_of(_group_of(document, group_id), queue_id).update(_as_read(values))

    return _checked(text, after, expected, f"queue {group_id}.{queue_id}")


def with_new_queue(text: str, group_id: int, values: dict[str, object]) -> str:
    """`text` with a new [[group.queue]] table (`values`, id and name first) at the
    end of group `group_id`'s tables: after its last key and the comments that
    follow it, before blank lines and the comment that heads whatever comes next."""
    lines = text.splitlines(keepends=True)
    tables = _tables(lines)
    _first, end = _group_span(tables, group_id)
    start, at = tables[end - 1].start + 1, tables[end - 1].end
    while at > start and (not lines[at - 1].strip() or _COMMENT.match(lines[at - 1])):
        at -= 1  # back over the blank lines and comments that end the group...
    while at < tables[end - 1].end and _COMMENT.match(lines[at]):
        at += 1  # ...then forward over the comments written right under its last key
    newline = _newline(lines)
    if lines[at - 1 : at] and not lines[at - 1].endswith("\n"):
        lines[at - 1] += newline
    block = [f"[[group.queue]]{newline}"]
    block += [f"{key} = {_value(v)}{newline}" for key, v in values.items()]
    after = "".join(lines[:at] + block + lines[at:])

    def expected(document: dict[str, Any]) -> None:
        _group_of(document, group_id).setdefault("queue", []).append(_as_read(values))

    return _checked(text, after, expected, f"a new queue in group {group_id}")


def _as_read(values: dict[str, object]) -> dict[str, Any]:
    """`values` as the file will read once `_value` wrote them, so a value of the
    wrong type is left to the parser's one line."""
    return tomllib.loads("".join(f"{key} = {_value(v)}\n" for key, v in values.items()))


def _newline(lines: list[str]) -> str:
    """The file's own line ending, for the lines an edit writes."""
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


def _group_of(document: dict[str, Any], group_id: int) -> dict[str, Any]:
    for group in document.get("group", []):
        if isinstance(group, dict) and group.get("id") == group_id:
            return group
    raise LookupError(f"no [[group]] with id = {group_id} in the file")


def _queue_of(group: dict[str, Any], queue_id: int) -> dict[str, Any]:
    for queue in group.get("queue", []):
        if isinstance(queue, dict) and queue.get("id") == queue_id:
            return queue
    raise LookupError(f"queue {queue_id} is not declared in group {group.get('id')}'s tables")


def _checked(before: str, after: str, expected: Callable[[dict[str, Any]], None], what: str) -> str:
    """`after`, if it reads (as TOML) as `before` with only the change `expected`
    makes to `before`'s document. Why: the edits work on lines, and a file laid out
    in a way the line scan does not know (a header `[[group . queue]]`, a quoted key,
    a header inside a multi-line string) got the change in another queue, which the
    parser then accepted: the operator was told "done" and a restart applied the
    limit elsewhere. Unchanged when `before` is no TOML: the parser names its fault."""
    try:
        document = tomllib.loads(before.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError:
        return after
    want = copy.deepcopy(document)
    expected(want)
    try:
        got: Any = tomllib.loads(after.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError:
        got = None
    if _canonical(got) != _canonical(want):
        raise LookupError(
            f"cannot change {what} in this file: its tables are written in a way the "
            "edit does not follow (e.g. a header with spaces or quotes, a key in "
            "quotes), and the file is left as it was; make the change by hand"
        )
    return after


def _canonical(document: object) -> str:
    """One text per document (a NaN equals itself here, unlike in ==)."""
    return json.dumps(document, sort_keys=True, default=str)


@contextlib.contextmanager
def edit_lock(path: Path) -> Iterator[None]:
    """Hold the edit lock of the bus file or the credentials file (an exclusive flock
    on `.NAME.lock` beside the file a symbolic link leads to), waiting for another
    holder, from reading the file to writing it back; OSError if it cannot be taken.
    Why: every group of a bus edits the same files; two `add-queue`s on two groups at
    once each read the file, added their queue and renamed their text over it, and
    one of the two queues was gone from the file (live until the next restart). Not
    the file itself: the rename replaces it, and a lock on the old inode guards
    nothing. Held for a read, a parse and a write; the kernel drops it if its holder
    dies."""
    real = Path(path).resolve()
    fd = os.open(real.parent / f".{real.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` by `text` whole (mrs.storage.atomic_file: synced, renamed over
    it, a symbolic link followed); the file's mode is kept."""
    replace_file(path, text.encode("utf-8"))
