"""The journals a group keeps and how their keys are laid out (queue or group, then seq).

Keys are big-endian so LMDB's byte order is the numeric order: a queue's DQF
records, or a target group's SAF records, sort together oldest first.
"""

from __future__ import annotations

import struct
from enum import StrEnum
from typing import Final

PREFIX = struct.Struct(">I")
"""The queue or group that starts a 12-byte key (a selection's prefix seeks to it)."""
_U64 = struct.Struct(">Q")
_QUEUE_SEQ = struct.Struct(">IQ")
_PACK_QUEUE_SEQ: Final = _QUEUE_SEQ.pack
"""Several keys per message: a C static, not a module lookup and a method lookup."""
_PACK_U64: Final = _U64.pack


class Journal(StrEnum):
    SAF = "saf"
    DQF = "dqf"
    DLJ = "dlj"
    PCJ = "pcj"
    META = "meta"
    MARKS = "marks"
    """DQF key -> times delivered, committed before each delivery (exact POSSDUPL)."""
    NOTICES = "notices"
    """Origin group + seq -> a confirm notice still to be sent to that group."""
    DEDUPE = "dedupe"
    """Idempotency key -> seq of the first copy stored."""


RECORD_JOURNALS = (Journal.SAF, Journal.DQF, Journal.DLJ, Journal.PCJ)


def queue_key(queue: int, seq: int) -> bytes:
    """DQF key: records of one queue sort together, oldest seq first."""
    return _PACK_QUEUE_SEQ(queue, seq)


def group_key(group: int, seq: int) -> bytes:
    """SAF key: records for one target group sort together, oldest seq first."""
    return _PACK_QUEUE_SEQ(group, seq)


def seq_key(seq: int) -> bytes:
    """DLJ/PCJ key: records sort by sequence number."""
    return _PACK_U64(seq)


def split_key(key: bytes) -> tuple[int | None, int]:
    """(queue or group, seq) for a 12-byte key, (None, seq) for an 8-byte key."""
    if len(key) == _QUEUE_SEQ.size:
        prefix, seq = _QUEUE_SEQ.unpack(key)
        return prefix, seq
    return None, _U64.unpack(key)[0]


def filing_problem(
    journal: str, key: bytes, seq: int, target_group: int, target_queue: int
) -> str | None:
    """Why a record that says it is `seq` to `target_group.target_queue` is not filed
    under the key it would have been written under in `journal` (None if it is).

    Why: a flipped bit in a key leaves a sound record (its checksum covers only the
    record) under another seq, queue or group, where nothing looks for it. DQF keys
    name the target queue, a group's SAF keys the target group (a client's SAF, and
    the DLJ and PCJ, only the seq)."""
    prefix, key_seq = split_key(key) if len(key) in (_U64.size, _QUEUE_SEQ.size) else (None, -1)
    if key_seq != seq:
        return f"filed under key {key.hex()}, but the record is seq {seq}"
    expected = target_queue if journal == Journal.DQF else target_group
    if prefix is not None and journal in (Journal.DQF, Journal.SAF) and prefix != expected:
        what = "queue" if journal == Journal.DQF else "group"
        return f"filed under key {key.hex()} ({what} {prefix}), but the record is for {expected}"
    return None
