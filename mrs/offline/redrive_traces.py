"""What one redrive of a group's DLJ left behind that the other must see: the attempt
marks of `mrs dlq-handler` with INPUTQ(DLJ) (a record put and not yet removed), and
`mrs jplay dlj`'s replay ledger (records replayed and left in the DLJ) and scope (a
run stopped with records in doubt).

Why: the two tools send the same dead letters under different idempotency keys
(`dlq:...`, `replay:...`), so the server cannot tell their copies apart. Each one,
killed, is finished exactly by its own next run (a repeat marked, or resent under the
same key); but an operator who finished a killed `mrs jplay dlj --remove` with the
handler, or a killed handler with jplay, had every record in doubt delivered twice,
the second copy unmarked. Each tool now reads the other's traces here and marks such
a put a possible duplicate.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import lmdb
import msgpack

from journals import Journal, seq_key
from mrs.offline.journal_files import REPLAY_LEDGER_DIRNAME

HANDLER_ATTEMPT_PREFIX = b"dlq-handler-attempt:"
"""The META key prefix of the handler's attempt marks (mrs.dlq.sources)."""
_U64 = struct.Struct(">Q")
_STORED_OR_PENDING = ("stored", "pending")
"""Ledger states of a replay that may have left a copy (mrs.tools.journal.ledger)."""


def handler_attempt_key(seq: int) -> bytes:
    """The META key of the handler's attempt mark on DLJ record `seq`."""
    return HANDLER_ATTEMPT_PREFIX + _U64.pack(seq)


class JplayTraces:
    """jplay's ledger and scope in a group's data directory, read-only, for the DLJ
    handler: which DLJ records a replay may already have delivered."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / REPLAY_LEDGER_DIRNAME
        self.env: lmdb.Environment | None = None
        self.db = None
        flags = _in_doubt(self.path)
        self.in_doubt = (
            None
            if flags is None
            else f"the last mrs jplay from {data_dir} ({flags}) was stopped with records "
            "in doubt (sent, no answer); run that jplay again to finish them exactly"
        )
        """Why any record may have a copy, else None: the last jplay run stopped with
        records in doubt (sent, no answer, and so no ledger entry), or its ledger
        cannot be read."""
        try:
            if not (self.path / "data.mdb").exists():
                return
            self.env = lmdb.open(str(self.path), readonly=True, max_dbs=4)
            self.db = self.env.open_db(Journal.DLJ.value.encode(), create=False)
        except lmdb.NotFoundError:
            self.db = None
        except (lmdb.Error, OSError) as error:
            # Another tool's file, damaged or unreadable: every put is marked (a
            # possible duplicate flagged, never one unflagged), and the note says why,
            # instead of the handler stopping on jplay's ledger.
            self.close()
            self.in_doubt = f"mrs jplay's ledger {self.path} is unreadable ({error})"

    def replayed(self, seq: int) -> bool:
        """Whether jplay stored (or was about to store) a copy of DLJ record `seq`."""
        if self.in_doubt is not None:
            return True
        if self.env is None or self.db is None:
            return False
        with self.env.begin(db=self.db) as txn:
            value = txn.get(seq_key(seq))
        if value is None:
            return False
        try:
            state = msgpack.unpackb(value)[0]
        except (ValueError, TypeError, IndexError):
            return True  # unreadable: a possible duplicate flagged, never one unflagged
        return state in _STORED_OR_PENDING

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def _in_doubt(ledger: Path) -> str | None:
    """The flags of the last jplay run if it left records of the DLJ in doubt (its
    scope.json, written by mrs.tools.journal.ledger), else None. A scope that cannot
    be read is taken as in doubt: a possible duplicate flagged, never one unflagged.
    So is one that does not say which journal (`journal` null: written by an earlier
    release, or records of both journals in doubt). One that names the PCJ is not:
    a replay of the PCJ sends copies of journaled puts, never of a dead letter, and
    after one stopped in doubt the handler marked every dead letter it redrove (each
    POSSDUPL, for an application that then checks each one by hand)."""
    try:
        scope = json.loads((ledger / "scope.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return "(its scope.json unreadable)"
    if not isinstance(scope, dict) or not scope.get("in_doubt"):
        return None
    journal = scope.get("journal")
    if journal == Journal.PCJ.value:
        return None
    to = scope.get("to")
    flags = f"--as {scope.get('as')}" + (f" --to {to}" if to else "")
    return flags if journal is None else f"{journal} {flags}"
