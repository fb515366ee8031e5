"""Real sample inputs for each fuzz target: frames, records, configs, rules, envelopes.

Mutations start from these (`mrs.testing.fuzz_targets`), so they are what the decoders
really read: frames a client and server exchange, records the journal writes, the
documented example configs, rules tables and policies from docs/, and envelopes
sealed with keys made once per process.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from journals.record import Record, encode_record
from mrs import protocol as wire

_ROOT = Path(__file__).resolve().parents[2]
RECORD_HEADER = struct.Struct(">BBI")
"""A journal record's header: magic, version, CRC32 of the payload."""

SEALED_DATA = b"pay 100 to BOB"


@functools.cache
def envelope_keys() -> tuple[Any, Any, Any]:
    """SHOP (signer), BILLING (reader) and a keyring with their public keys, made
    once per process and held in memory: a scratch directory of key files was left
    behind by every atheris run (libFuzzer ends the process without Python's atexit)."""
    from mrs.protection.keys import Identity

    shop, billing = Identity.generate("SHOP"), Identity.generate("BILLING")
    return shop, billing, _held_keyring(shop.public, billing.public)


def _held_keyring(*held: Any) -> Any:
    from mrs.protection.errors import PolicyError
    from mrs.protection.keys import Keyring, PublicKeys, check_name

    by_name = {keys.name: keys for keys in held}

    class HeldKeyring(Keyring):
        """A Keyring whose keys are given, not read from NAME.pub files."""

        def get(self, name: str) -> PublicKeys:
            keys = by_name.get(check_name(name))
            if keys is None:
                raise PolicyError(f"no public key for {name!r}")
            return keys

    return HeldKeyring(Path("/nonexistent"))


def _envelope_seeds() -> list[bytes]:
    from mrs.protection.envelope import Quality, seal

    shop, billing, keyring = envelope_keys()
    return [
        seal(shop, Quality.INTEGRITY, SEALED_DATA),
        seal(shop, Quality.PRIVACY, SEALED_DATA, [keyring.get("BILLING")]),
        seal(shop, Quality.PRIVACY, SEALED_DATA, [keyring.get("BILLING"), keyring.get("SHOP")]),
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
            wire.GetBatch(6, 8, 0, False, 16),
            wire.GiveBack([7, 8]),
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
        seeds.append(b"\x01" + stored[RECORD_HEADER.size :])
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


SEEDS: dict[str, Callable[[], list[bytes]]] = {
    "protocol": _protocol_seeds,
    "record": _record_seeds,
    "config": _config_seeds,
    "rules": _rules_seeds,
    "envelope": _envelope_seeds,
    "policies": _policies_seeds,
}
"""Each target's sample inputs, made when asked (some read docs/ or make keys)."""
