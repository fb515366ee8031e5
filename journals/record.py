"""The journal record and its on-disk format: versioned, checksummed msgpack.

A record is what every journal (SAF, DQF, DLJ, PCJ) stores for one message. The
format is `MAGIC (1 byte) | FORMAT_VERSION (1 byte) | CRC32 of payload (4 bytes, BE) |
msgpack payload`. The payload is a fixed-order array so that decoding costs one
`unpackb` and no dict lookups. A record that fails any check is a `CorruptRecord`,
which names the journal and key: corrupt data is reported, never delivered.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass, field, fields
from typing import Final

import msgpack
import msgspec

from journals.checksum import crc32

MAGIC: Final = 0x4D  # 'M'
FORMAT_VERSION: Final = 1
_HEADER = struct.Struct(">BBI")
# Read per record written or read back: a bound method's alias saves ~14 ns per call
# once compiled (benchmarks/README.md, "Final aliases").
_HEADER_SIZE: Final = _HEADER.size
_PACK_HEADER: Final = _HEADER.pack
_UNPACK_HEADER: Final = _HEADER.unpack_from


class CorruptRecord(Exception):
    """A stored record failed its format, version or checksum check."""

    def __init__(self, journal: str, key: bytes, problem: str) -> None:
        self.journal = journal
        self.key = key
        self.problem = problem
        super().__init__(f"corrupt record in {journal} at key {key.hex()}: {problem}")


@dataclass
class Record:
    """One journaled message and its bookkeeping.

    Addresses are plain ints so that the journal library needs nothing from `mrs`.
    `reason` holds why a message was dead-lettered; `confirm_*` are set in the PCJ;
    `extra` carries anything a later format wants without a version bump.
    """

    seq: int
    target_group: int
    target_queue: int
    source_group: int
    source_queue: int
    body: bytes = b""
    msg_class: int = 0
    msg_type: int = 0
    priority: int = 0
    delivery: int = 0
    uma: int = 0
    correlation_id: bytes = b""
    put_time_ns: int = 0
    written_time_ns: int = 0
    confirm_value: int = 0
    confirm_time_ns: int = 0
    reason: int = 0
    extra: dict = field(default_factory=dict)

    def __init__(
        self,
        seq: int,
        target_group: int,
        target_queue: int,
        source_group: int,
        source_queue: int,
        body: bytes = b"",
        msg_class: int = 0,
        msg_type: int = 0,
        priority: int = 0,
        delivery: int = 0,
        uma: int = 0,
        correlation_id: bytes = b"",
        put_time_ns: int = 0,
        written_time_ns: int = 0,
        confirm_value: int = 0,
        confirm_time_ns: int = 0,
        reason: int = 0,
        extra: dict | None = None,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.seq = seq
        self.target_group = target_group
        self.target_queue = target_queue
        self.source_group = source_group
        self.source_queue = source_queue
        self.body = body
        self.msg_class = msg_class
        self.msg_type = msg_type
        self.priority = priority
        self.delivery = delivery
        self.uma = uma
        self.correlation_id = correlation_id
        self.put_time_ns = put_time_ns
        self.written_time_ns = written_time_ns
        self.confirm_value = confirm_value
        self.confirm_time_ns = confirm_time_ns
        self.reason = reason
        self.extra = {} if extra is None else extra


_FIELD_NAMES = tuple(f.name for f in fields(Record))
_FIELD_VALUES = operator.attrgetter(*_FIELD_NAMES)
_FIELD_TYPES = tuple(
    {"body": bytes, "correlation_id": bytes, "extra": dict}.get(name, int) for name in _FIELD_NAMES
)
"""What encode_record writes in each place: a payload with the right checksum but a
str where an int belongs (a bug or a hand-edited file) is corrupt here, not a crash
in whichever reader meets it later (found by fuzzing, tests/process/test_fuzz.py)."""
"""All fields as a tuple in one C call: encoding is on every put's path."""


def encode_record(record: Record) -> bytes:
    """Record -> bytes with header and checksum."""
    return encode_values(_FIELD_VALUES(record))


_ENCODE: Final = msgspec.msgpack.Encoder().encode
"""Writes the same msgpack bytes as `msgpack.packb(values, use_bin_type=True)` for
the types a record holds (tests/unit/test_records_encode.py), in half the time: packb
makes a Packer per call, and this runs for every journaled message."""


def encode_values(values: tuple) -> bytes:
    """A record given as its field values in Record's order -> the bytes encode_record
    writes. For the put path, which has the fields at hand: building a Record only to
    read it back costs an object per message."""
    payload = _ENCODE(values)
    return _PACK_HEADER(MAGIC, FORMAT_VERSION, crc32(payload)) + payload


def decode_record(data: bytes, journal: str = "?", key: bytes = b"") -> Record:
    """bytes -> Record; raises CorruptRecord on any inconsistency."""
    if len(data) < _HEADER_SIZE:
        raise CorruptRecord(journal, key, f"{len(data)} bytes is shorter than the header")
    magic, version, checksum = _UNPACK_HEADER(data)
    if magic != MAGIC:
        raise CorruptRecord(journal, key, f"bad magic byte 0x{magic:02x}")
    if version != FORMAT_VERSION:
        raise CorruptRecord(journal, key, f"unknown format version {version}")
    payload = memoryview(data)[_HEADER_SIZE:]
    if crc32(payload) != checksum:
        raise CorruptRecord(journal, key, "checksum mismatch")
    try:  # msgspec checks every field's type in C; a refusal is worded below
        values = _DECODE_TYPED(payload)
    except Exception:  # noqa: BLE001 - any failure: the checks below say what is wrong
        return Record(*checked_values(payload, journal, key))
    return _record_of(values)


def _record_of(v: tuple) -> Record:
    """Record(*v), each field passed by position: compiled, a star call goes through
    the generic calling path and costs about twice as much (benchmarks/README.md)."""
    return Record(
        v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],
        v[9], v[10], v[11], v[12], v[13], v[14], v[15], v[16], v[17],
    )  # fmt: skip


_DECODE_TYPED: Final = msgspec.msgpack.Decoder(tuple[_FIELD_TYPES]).decode  # type: ignore[valid-type]
"""Decodes a record's payload and checks each field's type in one C call: every
message read back from a cold backlog passes here (benchmarks/README.md). It accepts what
`checked_values` accepts (tests/unit/test_records_encode.py holds the two equal)."""


def checked_values(payload: memoryview | bytes, journal: str = "?", key: bytes = b"") -> list:
    """The record's field values out of its msgpack payload, each of its type, or
    CorruptRecord saying what is wrong: the reference check, and the wording of a
    refusal."""
    try:
        values = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if not isinstance(values, list) or len(values) != len(_FIELD_NAMES):
            raise ValueError(f"not an array of {len(_FIELD_NAMES)} record fields")
        if tuple(map(type, values)) != _FIELD_TYPES:  # one C-level pass; words it below
            for name, value, kind in zip(_FIELD_NAMES, values, _FIELD_TYPES, strict=True):
                if type(value) is not kind:
                    raise ValueError(f"{name} is {type(value).__name__}, not {kind.__name__}")
        return values
    except Exception as error:  # noqa: BLE001 - any decode failure means corruption
        raise CorruptRecord(journal, key, f"undecodable payload: {error}") from None
