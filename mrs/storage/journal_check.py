"""Read a journal environment in a child process, so a corrupt file cannot kill us.

Why a child: LMDB trusts its file. A damaged page can make it raise (a traceback at
start-up) or fail an assertion and abort() the whole process (SIGABRT) — no Python
handler runs. So whoever must survive a damaged journal (the server before it opens
its journals, `mrs journal verify`, `mrs journal salvage`) lets a child walk it and
reads the child's report; a child that aborts is just a report of its own.

The child (`python -m mrs.storage.journal_check PATH [--from DB --after KEY] [--reverse]
[--records]`) opens the environment read-only, walks every named database (in key
order, or in reverse) and writes msgpack items to stdout:
`["db", name]`, `["item", key, value]` (with --records), `["end", name, count]`,
and `["error", message]` for an LMDB error it could catch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from mrs.limits import JOURNAL_WALK_TIMEOUT_S

FLUSH_EVERY = 64
DATABASES = ("saf", "dqf", "dlj", "pcj", "meta", "marks", "notices", "dedupe")
INDEXES = ("dqf-keys",)
"""Walked when checking, not copied out: a store rebuilds them (journals.dqf_index)."""


# ---------------------------------------------------------------------- the child
def _walk(
    path: str, records: bool, start_db: str | None, after: bytes | None, reverse: bool
) -> int:
    import lmdb

    out = sys.stdout.buffer
    packer = msgpack.Packer()

    def emit(*item: object) -> None:
        out.write(packer.pack(list(item)))

    try:
        try:
            env = lmdb.open(path, readonly=True, lock=True, max_dbs=16, subdir=True)
        except lmdb.Error:
            env = lmdb.open(path, readonly=True, lock=False, max_dbs=16, subdir=True)
        names = list(DATABASES) + ([] if records else list(INDEXES))
        if start_db is not None:
            names = names[names.index(start_db) :]
        for name in names:
            try:
                db = env.open_db(name.encode(), create=False)
            except lmdb.NotFoundError:
                continue
            emit("db", name)
            out.flush()
            if not records and not reverse and start_db is None:
                emit("end", name, _touch_all(env, db))
                out.flush()
                continue
            count = 0
            with env.begin(db=db, buffers=False) as txn:
                cursor = txn.cursor(db)
                if reverse:
                    positioned = cursor.last()
                    step = cursor.prev
                else:
                    positioned = (
                        cursor.set_range(after + b"\x00")
                        if after is not None and name == start_db
                        else cursor.first()
                    )
                    step = cursor.next
                while positioned:
                    key, value = cursor.item()
                    if records:
                        emit("item", key, value)
                    count += 1
                    if count % FLUSH_EVERY == 0:
                        out.flush()  # what was read survives a crash on the next page
                    positioned = step()
            emit("end", name, count)
            out.flush()
    except lmdb.Error as error:
        emit("error", f"{type(error).__name__}: {error}")
        out.flush()
        return 3
    out.flush()
    return 0


def _touch_all(env, db) -> int:
    """Walk every entry without copying it (the start-up check: a million 1 KiB
    records in half the time): touching each value's first and last byte is what
    faults here, in the child, where a damaged page or size points outside the map."""
    count = 0
    with env.begin(db=db, buffers=True) as txn:
        for value in txn.cursor(db).iternext(keys=False, values=True):
            if value:
                value[0] + value[-1]  # noqa: B018 - read for the fault, not the value
            count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = args.pop(0)
    records = "--records" in args
    reverse = "--reverse" in args
    start_db = args[args.index("--from") + 1] if "--from" in args else None
    after = bytes.fromhex(args[args.index("--after") + 1]) if "--after" in args else None
    return _walk(path, records, start_db, after, reverse)


# ---------------------------------------------------------------------- the parent
@dataclass
class Walk:
    """What one child walk reported."""

    items: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    failure: str | None = None
    """None if the child walked everything; else how it failed (error, signal)."""
    failed_in: str | None = None
    """The database being walked when it failed."""


def walk(
    journals_path: Path,
    *,
    records: bool = False,
    start_db: str | None = None,
    after: bytes | None = None,
    reverse_db: str | None = None,
    timeout_s: float = JOURNAL_WALK_TIMEOUT_S,
) -> Walk:
    """Walk a journal environment in a child process and collect its report."""
    command = [sys.executable, "-m", "mrs.storage.journal_check", str(journals_path)]
    if records:
        command.append("--records")
    if reverse_db is not None:
        command += ["--from", reverse_db, "--reverse"]
    elif start_db is not None:
        command += ["--from", start_db]
        if after is not None:
            command += ["--after", after.hex()]
    result = Walk()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    ) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            stdout, stderr = child.communicate()
            result.failure = f"reading it took over {timeout_s:g} s"
    current: str | None = None
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(stdout)
    try:
        for item in unpacker:
            kind = item[0]
            if kind == "db":
                current = item[1]
                if reverse_db is not None and current != reverse_db:
                    break
            elif kind == "item":
                result.items.append((current, item[1], item[2]))
            elif kind == "end":
                result.counts[item[1]] = item[2]
                current = None
                if reverse_db is not None:
                    break
            elif kind == "error":
                result.failure = item[1]
    except (ValueError, msgpack.UnpackException):
        pass  # the child died mid-item: what came before stands
    if result.failure is None and child.returncode != 0:
        if child.returncode < 0:
            name = signal.Signals(-child.returncode).name
            result.failure = f"LMDB crashed reading it ({name})"
        else:
            tail = stderr.decode(errors="replace").strip().splitlines()
            result.failure = tail[-1] if tail else f"exit status {child.returncode}"
    result.failed_in = current if result.failure is not None else None
    return result


def verify_before_open(journals_path: Path) -> str | None:
    """None if the environment can be opened and walked; else one line naming the
    file and the damage (for the server to refuse to start with)."""
    data_file = Path(journals_path) / "data.mdb"
    if not data_file.exists():
        return None
    if not os.access(data_file, os.R_OK):
        return f"journal {data_file} cannot be read (permission denied)"
    report = walk(Path(journals_path))
    if report.failure is None:
        return None
    where = f" (in its {report.failed_in} database)" if report.failed_in else ""
    return (
        f"journal {data_file} is damaged{where}: {report.failure}; "
        f"run `mrs journal verify --data-dir {Path(journals_path).parent}` and "
        "`mrs journal salvage` to copy out every intact record"
    )


if __name__ == "__main__":
    sys.exit(main())
