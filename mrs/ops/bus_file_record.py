"""The bus file as the group's last run-time change wrote it, kept in the group's
journals, so that the instance that becomes active next serves the same queues; and
the credentials file as the last `mrs admin grant` wrote it, so that it grants the
same (`CREDENTIALS_FILE_KEY`, `catch_up_credentials`).

Why: `mrs admin add-queue` and `set-limits` change the active's queues and write its
bus file. A replicated group's other instances run on other machines, each with its
own copy of the file: after a failover the new active would serve the queues of its
own, older copy, and the messages of a queue added at run time would wait there,
not delivered (found by a probe: three answered puts to a queue added a moment
before the active was killed were "kept, not delivered" by the new active). So each
such change also commits the new file's text to the journals (META, `BUS_FILE_KEY`),
answered once durable as every commit is, on a majority of the instances; the
instance that wins the next term brings its own file up to that text first
(`catch_up`).

A grant (`mrs admin grant`) writes the active's credentials file, which the other
machines lack the same way: after a failover a principal granted a queue a moment
before was refused it. Its text (salted SCRAM verifiers and grants, as in the file,
which is 0600; the journals' directory is the owner's alone) is journaled the same
way and brought up the same way.

Which file wins: the journaled text carries the digests of the texts it descends
from (`lineage`, each earlier text a run-time change replaced). An instance's file
that is one of them is only behind, and is replaced; one that is neither the text
nor one of its ancestors was edited on that machine since, and is kept, with one line
naming the queues it lacks (the operator's edit is not overwritten unseen).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import msgpack

from journals import Journal, WriteBatch
from mrs.config.bus import ConfigError, parse_config
from mrs.config.rewrite import write_atomically

log = logging.getLogger("mrs.ops")

BUS_FILE_KEY = b"admin.bus_file"
"""META: the bus file's text after the last run-time change, with its lineage."""
CREDENTIALS_FILE_KEY = b"admin.credentials_file"
"""META: the credentials file's text after the last `mrs admin grant`, with its lineage."""
LINEAGE_MAX = 64
"""Digests of earlier texts kept: a file more changes behind than this is kept as an
edited one (and said so)."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class BusFileRecord:
    text: str
    lineage: tuple[str, ...]
    """Digests of the texts this one replaced, oldest first."""

    def value(self) -> bytes:
        return msgpack.packb([self.text, list(self.lineage)])

    @classmethod
    def of(cls, raw: bytes | None) -> BusFileRecord | None:
        """The record in `raw`; None for none, or for one that does not decode (as if
        no change had been journaled: the instance keeps its own file)."""
        if raw is None:
            return None
        try:
            text, lineage = msgpack.unpackb(raw)
            return cls(str(text), tuple(str(each) for each in lineage))
        except (ValueError, TypeError):
            log.error("the journaled bus file does not decode: ignored")
            return None

    def after(self, before_text: str, after_text: str) -> BusFileRecord:
        """The record of one more change, from `before_text` to `after_text`."""
        return BusFileRecord(after_text, (*self.lineage, digest(before_text))[-LINEAGE_MAX:])

    def batch(self, key: bytes = BUS_FILE_KEY) -> WriteBatch:
        """The commit that journals this record (under `key`: which file it is)."""
        return WriteBatch.empty().put_raw(Journal.META, key, self.value())


def next_record(previous: BusFileRecord | None, before_text: str, after_text: str) -> BusFileRecord:
    """The record of a run-time change from `before_text` to `after_text`, after the
    `previous` one journaled (None: the first)."""
    return (previous or BusFileRecord(before_text, ())).after(before_text, after_text)


def bring_up(path: Path, record: BusFileRecord | None, what: str) -> str:
    """Bring the file at `path` up to the journaled `record`: "same", "updated" (it
    was one of the record's ancestors and now holds its text), "edited" (edited here
    since: left as it is; the caller says what it lacks), "kept" (it could not be
    read or written: said here) or "none" (no record, or no file: the simulator's bus)."""
    if record is None or not path.is_file():
        return "none"
    try:
        own = path.read_text(encoding="utf-8")
        if own == record.text:
            return "same"
        if digest(own) in record.lineage:
            write_atomically(path, record.text)
            log.info("%s %s brought up to the group's last run-time change", what, path)
            return "updated"
    except (OSError, UnicodeDecodeError) as error:
        log.error("%s %s not brought up to the group's last change: %s", what, path, error)
        return "kept"
    return "edited"


def catch_up(path: Path, record: BusFileRecord | None, group_id: int) -> str:
    """The bus file brought up (`bring_up`); one edited since is kept, with one line
    naming the queues it lacks. What `bring_up` says, "kept" for "edited"."""
    done = bring_up(path, record, "bus file")
    if done != "edited" or record is None:
        return done
    try:
        own = path.read_text(encoding="utf-8")
        journaled = parse_config(record.text, path).group(group_id).queues
        mine = parse_config(own, path).group(group_id).queues
        lacking = sorted(set(journaled) - set(mine))
    except (ConfigError, LookupError, OSError, UnicodeDecodeError):
        lacking = []
    if not lacking:  # e.g. the group made replicated since: nothing of it is missing
        log.info("bus file %s differs from the group's last run-time change: kept", path)
        return "kept"
    log.warning(
        "bus file %s was edited since the group's last run-time change; it is kept "
        "(queues that change has and it lacks: %s)",
        path,
        ", ".join(f"{group_id}.{queue_id}" for queue_id in lacking),
    )
    return "kept"


def catch_up_credentials(path: Path, record: BusFileRecord | None) -> str:
    """The credentials file brought up to the group's last grant (`bring_up`); one
    edited on this machine since (`mrs creds`) is kept, with one line saying so."""
    done = bring_up(path, record, "credentials file")
    if done != "edited":
        return done
    log.warning(
        "credentials file %s was edited on this machine since the group's last `mrs admin "
        "grant`; it is kept (`mrs admin journal` shows that grant: make it here too)",
        path,
    )
    return "kept"
