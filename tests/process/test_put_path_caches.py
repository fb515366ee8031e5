"""The put path's caches give the answers the uncached code gives: address resolution
(per bus config, bounded, refusals not cached); the body fingerprint and the
idempotency key lookup see every change."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from journals import InlineWriter, Journal, JournalStore, WriteBatch
from mrs.config.bus import parse_config
from mrs.errors import Refused
from mrs.group import context as context_module
from mrs.group.context import GroupContext
from mrs.group.idempotency import AppKeys, blake2b_fingerprint, fingerprint, pack_value
from mrs.model import Address

BUS = """
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group.queue]]
id = 10
name = "IN"
[[group]]
id = 2
name = "G2"
listen = "127.0.0.1:0"
data_dir = "g2"
[[link]]
groups = [1, 2]
"""


def test_the_fingerprint_follows_the_body() -> None:
    body = b"a" * 100
    first = fingerprint(body)
    assert fingerprint(body) == first == fingerprint(bytes(body))  # same object, equal copy
    assert fingerprint(b"b" * 100) != first
    mutable = bytearray(b"a" * 100)
    assert fingerprint(mutable) == first
    mutable[0] = ord("z")
    assert fingerprint(mutable) != first


def test_a_key_lookup_sees_every_commit(tmp_path: Path) -> None:
    store = JournalStore(tmp_path / "j", 64 << 20)
    now_ns = [1_000]
    keys = AppKeys(store, window_s=10.0, clock_ns=lambda: now_ns[0])
    digest = fingerprint(b"body")
    assert keys.lookup("app:k", digest, b"body") is None
    store.commit_now(
        WriteBatch.empty().put_raw(Journal.DEDUPE, b"app:k", pack_value(7, 10**12, digest))
    )
    assert keys.lookup("app:k", digest, b"body") == (7, True)
    assert keys.lookup("app:k", fingerprint(b"other"), b"other") == (7, False)
    store.commit_now(
        WriteBatch.empty().put_raw(Journal.DEDUPE, b"app:k", pack_value(9, 10**12, digest))
    )
    assert keys.lookup("app:k", digest, b"body") == (9, True)
    now_ns[0] = 10**12  # the window ends: expired, though the value was read before
    assert keys.lookup("app:k", digest, b"body") is None
    store.commit_now(WriteBatch.empty().delete(Journal.DEDUPE, b"app:k"))
    now_ns[0] = 1_000
    assert keys.lookup("app:k", digest, b"body") is None
    store.close()


def test_a_key_stored_with_a_blake2b_fingerprint_still_matches_its_body(tmp_path: Path) -> None:
    """A value written before the fingerprint became SHA-256 (32 bytes, BLAKE2b): a
    retry of the same body is still the same message, another body is still refused."""
    store = JournalStore(tmp_path / "j", 64 << 20)
    keys = AppKeys(store, window_s=10.0, clock_ns=lambda: 1_000)
    old_value = struct.pack(">QQ16s", 7, 10**12, blake2b_fingerprint(b"body"))
    store.commit_now(WriteBatch.empty().put_raw(Journal.DEDUPE, b"app:k", old_value))
    assert fingerprint(b"body") != blake2b_fingerprint(b"body")
    assert keys.lookup("app:k", fingerprint(b"body"), b"body") == (7, True)
    assert keys.lookup("app:k", fingerprint(b"other"), b"other") == (7, False)
    assert keys.conflict("app:k", b"body") is None
    assert "another body" in (keys.conflict("app:k", b"other") or "")
    store.close()


def _context(tmp_path: Path) -> GroupContext:
    bus = parse_config(BUS, tmp_path / "bus.toml")
    store = JournalStore(tmp_path / "journals")  # the real kinds: a compiled context checks
    writer = InlineWriter(store, wake=lambda: None)
    return GroupContext(bus, bus.group(1), store=store, writer=writer, timers=None)


def test_resolve_caches_per_text_and_per_bus_config(tmp_path: Path) -> None:
    ctx = _context(tmp_path)
    assert ctx.resolve("IN") == ctx.resolve("1.10") == Address(1, 10)
    assert ctx.resolve("G2.5") == Address(2, 5)
    for _ in range(2):  # a refusal is given every time, not remembered as an address
        with pytest.raises(Refused):
            ctx.resolve("NOSUCH")
        with pytest.raises(Refused):
            ctx.resolve("9.1")
    other = parse_config(BUS.replace('name = "IN"', 'name = "ORDERS"'), tmp_path / "b2.toml")
    ctx.bus = other  # another bus config: nothing resolved under the old one is used
    with pytest.raises(Refused):
        ctx.resolve("IN")
    assert ctx.resolve("ORDERS") == Address(1, 10)


def test_resolve_cache_is_bounded(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(context_module, "RESOLVED_CACHE_MAX", 8)
    ctx = _context(tmp_path)
    for queue in range(1, 30):
        assert ctx.resolve(f"1.{queue}") == Address(1, queue)
        assert len(ctx._resolved.addresses) <= 8
