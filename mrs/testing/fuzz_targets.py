"""Fuzz targets (each feeds one input to one decoder, letting only its own error out).

Why a module of its own: the same four targets run under two drivers, a short
mutation run inside the test suite (tests/process/test_fuzz.py) and the long coverage-guided
atheris run (`benchmarks/fuzz.py`), and each needs real sample inputs to start
from. A target returns normally when the input decoded or was refused with the
decoder's own error (`ProtocolError`, `CorruptRecord`, `ConfigError`, `RulesError`);
any other exception escapes, and the driver reports it as a finding.

The targets:
- `protocol`: bytes off a socket into `mrs.protocol.Connection` (both roles, before
  and after the handshake, then EOF).
- `record`: bytes out of a journal into `journals.record.decode_record`, as stored
  and with a valid checksum put over the payload (else almost every mutation would
  stop at the checksum and the msgpack decoding behind it would go untested).
- `config`: a bus configuration file's bytes into `mrs.config.bus`'s loader.
- `rules`: a DLQ handler rules table into `mrs.dlq.parser.parse_table`.
- `envelope`: a protected message body into `mrs.protection.envelope.open_envelope`
  (it opens to exactly what was sealed, or raises `ProtectionError`).
- `policies`: a protection policy file into `mrs.protection.policy.parse_policies`
  (`PolicyError`).

The sample inputs are in `mrs.testing.fuzz_seeds`. `mutate` and `run_mutations` are the
driver used where atheris is absent (and by the short run in the tests):
byte-level mutations of the seeds, reproducible from a seed.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Callable
from pathlib import Path

from journals.record import MAGIC, CorruptRecord, Record, decode_record
from mrs import protocol as wire
from mrs.config.bus import ConfigError, parse_config
from mrs.dlq.parser import RulesError, parse_table
from mrs.model import Status
from mrs.testing.fuzz_seeds import RECORD_HEADER, SEALED_DATA, SEEDS, envelope_keys

Target = Callable[[bytes], None]

_CONFIG_PATH = Path("/nonexistent-fuzz-dir/bus.toml")
"""Where a fuzzed config claims to live: relative data_dirs resolve under a directory
that does not exist, so nothing on this machine is touched."""
_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(Record))
"""Every field of a record (not `__slots__`: the compiled Record has none, docs/native.md)."""
_RECORD_FIELD_TYPES = {
    "body": (bytes,),
    "correlation_id": (bytes,),
    "extra": (dict,),
}


def fuzz_protocol(data: bytes) -> None:
    """First byte picks the side and state; the rest arrives in two reads, then EOF."""
    if not data:
        return
    selector, payload = data[0], data[1:]
    role = "server" if selector & 1 else "client"
    connection = _opened(role) if selector & 2 else wire.Connection(role)
    cut = (selector >> 2) * len(payload) // 64
    try:
        for chunk in (payload[:cut], payload[cut:], b""):
            connection.receive_data(chunk)
            connection.events()
    except wire.ProtocolError as error:
        assert isinstance(error.status, Status), error


def _opened(role: str) -> wire.Connection:
    """A connection of `role` past its handshake, ready for requests or replies."""
    client, server = wire.Connection("client"), wire.Connection("server")
    server.receive_data(client.send(wire.Hello(wire.PROTOCOL_VERSION, "fuzz")))
    server.events()
    client.receive_data(server.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "g1", 0)))
    client.events()
    return client if role == "client" else server


def fuzz_record(data: bytes) -> None:
    """First byte even: the bytes as stored; odd: the rest with a true header over it."""
    if not data:
        return
    if data[0] & 1:
        payload = data[1:]
        data = RECORD_HEADER.pack(MAGIC, 1, zlib.crc32(payload)) + payload
    try:
        record = decode_record(data, "FUZZ", b"k")
    except CorruptRecord:
        return
    _check_record_types(record)


def _check_record_types(record: Record) -> None:
    """A record that decodes is one the journal could have written: every field has
    its type (an int where an int belongs), so no reader trips over it later."""
    for name in _RECORD_FIELDS:
        value = getattr(record, name)
        expected = _RECORD_FIELD_TYPES.get(name, (int,))
        assert isinstance(value, expected) and not isinstance(value, bool), (name, value)


def fuzz_config(data: bytes) -> None:
    """Bytes as `load_config` reads them from a file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # load_config answers this ConfigError before parsing
    try:
        parse_config(text, _CONFIG_PATH)
    except ConfigError:
        return


def fuzz_rules(data: bytes) -> None:
    """A rules table as the handler reads it (UTF-8 with replacement)."""
    try:
        parse_table(data.decode("utf-8", errors="replace"))
    except RulesError:
        return


def fuzz_envelope(data: bytes) -> None:
    """A body that claims to be protected: opens to what SHOP sealed, or is refused."""
    from mrs.protection.envelope import open_envelope
    from mrs.protection.errors import ProtectionError

    _, billing, keyring = envelope_keys()
    try:
        opened = open_envelope(data, keyring, billing)
    except ProtectionError:
        return
    assert (opened.signer, opened.data) == ("SHOP", SEALED_DATA), opened


def fuzz_policies(data: bytes) -> None:
    """A policy file as the applications and groups read it."""
    from mrs.protection.errors import PolicyError
    from mrs.protection.policy import parse_policies

    try:
        parse_policies(data.decode("utf-8", errors="replace"), _CONFIG_PATH)
    except PolicyError:
        return


TARGETS: dict[str, Target] = {
    "protocol": fuzz_protocol,
    "record": fuzz_record,
    "config": fuzz_config,
    "rules": fuzz_rules,
    "envelope": fuzz_envelope,
    "policies": fuzz_policies,
}


def fuzz_mixed(data: bytes) -> None:
    """All targets in one: the first byte picks one (for a short run in one process,
    which pays the instrumentation of the imports once)."""
    if data:
        names = sorted(TARGETS)
        TARGETS[names[data[0] % len(names)]](data[1:])


def seeds(target: str) -> list[bytes]:
    """Real sample inputs for `target` ("mixed": all, each behind its selector byte)."""
    if target == "mixed":
        names = sorted(TARGETS)
        return [bytes([index]) + seed for index, name in enumerate(names) for seed in seeds(name)]
    return SEEDS[target]()


_INTERESTING = (
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\xc0",
    b"\xdc\xff\xff",
    b"\xdd\xff\xff\xff\xff",
    b"\xcf" + b"\xff" * 8,
    b"\xd3" + b"\x80" + b"\x00" * 7,
    b"(",
    b")",
    b"+",
    b"'",
    b'"',
    b"[",
    b"]",
    b"=",
    b"\n",
    b"*",
    b"\\u0000",
    b"-1",
    b"99999999999999999999",
    b"1e999",
)


def mutate(data: bytes, rng: random.Random, others: list[bytes]) -> bytes:
    """One to four byte-level edits: flip, insert, delete, duplicate, splice, or a
    value known to sit on a boundary (msgpack length prefixes, TOML/rules syntax)."""
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(buffer))
        kind = rng.randrange(7)
        if kind == 0 and buffer:
            index = min(at, len(buffer) - 1)
            buffer[index] ^= 1 << rng.randrange(8)
        elif kind == 1:
            buffer[at:at] = bytes([rng.randrange(256)])
        elif kind == 2 and buffer:
            del buffer[at : at + rng.randint(1, 8)]
        elif kind == 3:
            end = min(len(buffer), at + rng.randint(1, 16))
            buffer[at:at] = buffer[at:end]
        elif kind == 4 and others:
            other = rng.choice(others)
            start = rng.randint(0, len(other))
            buffer[at:] = other[start:]
        else:
            buffer[at:at] = rng.choice(_INTERESTING)
    return bytes(buffer)


def run_mutations(target: str, count: int, seed: int = 0) -> int:
    """Feed `count` mutated seeds to `target`; returns how many ran (all, or raises
    the finding). Inputs that decode join the pool, so mutations build on them."""
    rng = random.Random(seed)
    pool = seeds(target)
    run = TARGETS[target]
    for _ in range(count):
        data = mutate(rng.choice(pool), rng, pool)
        run(data)
        if len(pool) < _POOL_MAX and rng.random() < 0.01:
            pool.append(data)
    return count


_POOL_MAX = 256
