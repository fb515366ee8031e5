"""Fuzz targets (each feeds one input to one decoder, letting only its own error out).

Why a module of its own: the same four targets run under two drivers, a short
mutation run inside the test suite (tests/test_fuzz.py) and the long coverage-guided
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
- `config`: a bus configuration file's bytes into `mrs.config`'s loader.
- `rules`: a DLQ handler rules table into `mrs.dlq.parser.parse_table`.
- `envelope`: a protected message body into `mrs.protection.envelope.open_envelope`
  (it opens to exactly what was sealed, or raises `ProtectionError`).
- `policies`: a protection policy file into `mrs.protection.policy.parse_policies`
  (`PolicyError`).

`mutate` and `run_mutations` are the driver used where atheris is absent (and by the
short run in the tests): byte-level mutations of the seeds, reproducible from a seed.
"""

from __future__ import annotations

import functools
import random
import re
import struct
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from journals.record import MAGIC, CorruptRecord, Record, decode_record, encode_record
from mrs import protocol as wire
from mrs.config import ConfigError, parse_config
from mrs.dlq.parser import RulesError, parse_table
from mrs.model import Status

Target = Callable[[bytes], None]

_ROOT = Path(__file__).resolve().parent.parent
_CONFIG_PATH = Path("/nonexistent-fuzz-dir/bus.toml")
"""Where a fuzzed config claims to live: relative data_dirs resolve under a directory
that does not exist, so nothing on this machine is touched."""
_RECORD_HEADER = struct.Struct(">BBI")
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
        data = _RECORD_HEADER.pack(MAGIC, 1, zlib.crc32(payload)) + payload
    try:
        record = decode_record(data, "FUZZ", b"k")
    except CorruptRecord:
        return
    _check_record_types(record)


def _check_record_types(record: Record) -> None:
    """A record that decodes is one the journal could have written: every field has
    its type (an int where an int belongs), so no reader trips over it later."""
    for name in Record.__slots__:
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


_SEALED_DATA = b"pay 100 to BOB"


@functools.cache
def _envelope_keys() -> tuple[Any, Any, Any]:
    """SHOP (signer), BILLING (reader) and a keyring with their public keys, made
    once per process in a scratch directory that lives as long as the process."""
    from mrs.protection.keys import Identity, Keyring, write_identity

    directory = Path(tempfile.mkdtemp(prefix="mrs-fuzz-keys-"))
    shop, billing = Identity.generate("SHOP"), Identity.generate("BILLING")
    for identity in (shop, billing):
        write_identity(identity, directory)
    return shop, billing, Keyring(directory)


def fuzz_envelope(data: bytes) -> None:
    """A body that claims to be protected: opens to what SHOP sealed, or is refused."""
    from mrs.protection.envelope import open_envelope
    from mrs.protection.errors import ProtectionError

    _, billing, keyring = _envelope_keys()
    try:
        opened = open_envelope(data, keyring, billing)
    except ProtectionError:
        return
    assert (opened.signer, opened.data) == ("SHOP", _SEALED_DATA), opened


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
    return {
        "protocol": _protocol_seeds,
        "record": _record_seeds,
        "config": _config_seeds,
        "rules": _rules_seeds,
        "envelope": _envelope_seeds,
        "policies": _policies_seeds,
    }[target]()


def _envelope_seeds() -> list[bytes]:
    from mrs.protection.envelope import Quality, seal

    shop, billing, keyring = _envelope_keys()
    return [
        seal(shop, Quality.INTEGRITY, _SEALED_DATA),
        seal(shop, Quality.PRIVACY, _SEALED_DATA, [keyring.get("BILLING")]),
        seal(shop, Quality.PRIVACY, _SEALED_DATA, [keyring.get("BILLING"), keyring.get("SHOP")]),
    ]


def _policies_seeds() -> list[bytes]:
    docs = (_ROOT / "docs" / "security-protection.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", docs, flags=re.DOTALL)
    return [_POLICIES_SEED, *(block.encode() for block in blocks if "[[policy]]" in block)]


_POLICIES_SEED = b"""\
keys_dir = "keys"
[[policy]]
queue = "1.10"
protection = "privacy"
signers = ["SHOP"]
recipients = ["BILLING"]
tolerate = false
[[policy]]
queue = "2.96"
protection = "integrity"
[[group_key]]
group = 1
key = "keys/NYC.key"
"""


def _protocol_seeds() -> list[bytes]:
    client, server = wire.Connection("client"), wire.Connection("server")
    hello = client.send(wire.Hello(wire.PROTOCOL_VERSION, "fuzz"))
    server.receive_data(hello)
    server.events()
    link_hello = wire.Connection("client").send(
        wire.Hello(wire.PROTOCOL_VERSION, "mrs-link-1", "link")
    )
    welcome = server.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "g1", 0))
    requests = b"".join(
        client.send(event)
        for event in (
            wire.Attach(1, "1.10"),
            wire.Put(2, "2.20", b"body", 1, 1, 0, 0, 0, 0, b"c", "", {"k": 1}),
            wire.Get(3, 1000),
            wire.Confirm(4, 7, 0, 0),
            wire.CancelGet(3),
            wire.StatusRequest(5),
        )
    )
    return [
        bytes([0]) + hello,
        bytes([1]) + hello,
        bytes([0]) + link_hello,
        bytes([0]) + welcome,
        bytes([3 | 32 << 2 & 0xFF]) + requests,
        bytes([3]) + requests,
    ]


def _record_seeds() -> list[bytes]:
    full = Record(
        seq=7,
        target_group=2,
        target_queue=20,
        source_group=1,
        source_queue=10,
        body=b"shift totals",
        msg_class=28,
        msg_type=-801,
        priority=1,
        delivery=3,
        uma=2,
        correlation_id=b"order-18",
        put_time_ns=1_700_000_000_000_000_000,
        reason=1,
        extra={"headers": {"k": "v"}},
    )
    plain = Record(1, 1, 10, 1, 11)
    seeds = []
    for record in (full, plain):
        stored = encode_record(record)
        seeds.append(b"\x00" + stored)
        seeds.append(b"\x01" + stored[_RECORD_HEADER.size :])
    return seeds


def _config_seeds() -> list[bytes]:
    secured = _SECURITY_KEYS + _CONFIG_SEED + _TLS_TABLE
    return [(_ROOT / "docs" / "examples" / "bus.toml").read_bytes(), _CONFIG_SEED, secured]


_SECURITY_KEYS = b"""\
protection = "protection.toml"
[auth]
credentials = "creds.toml"
link_secrets = "secrets"
"""
_TLS_TABLE = b"""\
[group.tls]
ca = "certs/ca.pem"
cert = "certs/group-2.pem"
key = "certs/group-2.key"
client_cert = "required"
"""


_CONFIG_SEED = b"""\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:7001"
data_dir = "g1"
pcj_default = true
[group.limits]
dqf_messages_max = 100
message_bytes_max = 65536
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:7002"
data_dir = "g2"
[[group.queue]]
id = 20
name = "SHIPPING"
confirm = "implicit"
recoverable = false
[[link]]
groups = [1, 2]
"""


def _rules_seeds() -> list[bytes]:
    docs = (_ROOT / "docs" / "dlq-handler.md").read_text()
    blocks = re.findall(r"```\n(.*?)```", docs, flags=re.DOTALL)
    return [_RULES_SEED, *(block.encode() for block in blocks if "ACTION(" in block)]


_RULES_SEED = b"""\
* Control data: the DLQ of this group, re-scan every 5 s, stop when idle.
INPUTQ(' ') RETRYINT(5) WAIT(NO)
REASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(3)
DESTQ(ORD*) MSGTYPE(MQMT_REPLY) ACTION(FWD) +
   FWDQ(&REPLYQ) FWDQM(&REPLYQM) HEADER(NO)
PERSIST(MQPER_PERSISTENT) FORMAT(' '), ACTION(DISCARD)
REASON(MQRC_UNKNOWN_OBJECT_NAME) DESTQ(50) ACTION(FWD) FWDQ(ANYORDER)
ACTION(IGNORE)
"""


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
