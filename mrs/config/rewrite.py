"""Run-time changes written back to the bus TOML: a queue's limits, a new queue.

Why text edits and not a TOML writer: the operator's file keeps its comments, order
and layout; only the lines of the one queue changed (or the new queue's table) are
touched. The result is parsed with the real parser (mrs.config.bus.parse_config)
before anything is written, so a bad value is refused with the parser's one line,
and the file is replaced atomically (a temporary file in the same directory,
fsync'd, renamed over it): a server starting meanwhile reads the old or the new file,
never half of one, and a restart keeps the change.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mrs.storage.atomic_file import replace_file

_HEADER = re.compile(r"^\ufeff?\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?\s*(#.*)?$")
_ID = re.compile(r"^\s*id\s*=\s*([0-9]+)\s*(#.*)?$")


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


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def with_queue_values(text: str, group_id: int, queue_id: int, values: dict[str, object]) -> str:
    """`text` with `key = value` set in the [[group.queue]] of `queue_id` in group
    `group_id` (a line replaced, or added after its `id` line)."""
    lines = text.splitlines(keepends=True)
    tables = _tables(lines)
    first, end = _group_span(tables, group_id)
    for table in tables[first:end]:
        if table.name == "group.queue" and table.table_id == queue_id:
            break
    else:
        raise LookupError(f"queue {queue_id} is not declared in group {group_id}'s tables")
    body = lines[table.start + 1 : table.end]
    for key, value in values.items():
        line = f"{key} = {_value(value)}\n"
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for index, existing in enumerate(body):
            if pattern.match(existing):
                body[index] = line
                break
        else:
            at = next((i + 1 for i, one in enumerate(body) if _ID.match(one)), 0)
            body.insert(at, line)
    return "".join(lines[: table.start + 1] + body + lines[table.end :])


def with_new_queue(text: str, group_id: int, values: dict[str, object]) -> str:
    """`text` with a new [[group.queue]] table (`values`, id and name first) at the
    end of group `group_id`'s tables."""
    lines = text.splitlines(keepends=True)
    tables = _tables(lines)
    _first, end = _group_span(tables, group_id)
    at = tables[end - 1].end
    while at > tables[end - 1].start + 1 and not lines[at - 1].strip():
        at -= 1  # before the blank lines that end the group
    if lines[at - 1 : at] and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    block = ["[[group.queue]]\n"] + [f"{key} = {_value(v)}\n" for key, v in values.items()]
    return "".join(lines[:at] + block + lines[at:])


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` by `text` whole (mrs.storage.atomic_file: synced, renamed over
    it, a symbolic link followed); the file's mode is kept."""
    replace_file(path, text.encode("utf-8"))
