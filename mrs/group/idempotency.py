"""Idempotency keys: scoped by sender and target, bound to the body, with a window.

Why: a key used to be one name per group, so key `k` to queue 10 and then key `k`
to queue 11 answered the second put STORED with the first's seq and never delivered
it; anyone could claim a key first; keys never expired. Now

- the stored key is `app:<sender>><target>:<key>` (sender = the putting queue, target
  = the target queue), so the same key from another sender or to another target is
  another message;
- the stored value holds the first copy's seq, a fingerprint of its body and the end
  of its dedupe window: a put reusing a live key with a *different* body is refused
  with KEY_REUSED (nothing stored, no UMA); with the same body it is answered with
  the first copy's seq (STORED) and not stored again;
- after `limits.dedupe_window_s` (default 7 days) a key expires: the same key then
  stores a new message, and expired keys are purged by a sweep of every key at
  start-up and every 10 minutes, so the journal does not grow with old keys. The sweep
  goes in steps from a cursor (`expired`), each looking at DEDUPE_PURGE_SCAN_MAX keys
  at most. Why: a purge used to take the first 10,000 expired keys found from the first
  key, once every 10 minutes: a producer keying more than ~17 puts a second (every
  recoverable put of a replicated group's client carries a key) made expired keys
  faster than they went, so the journal grew for ever past the window; and each purge
  looked at every live key before the expired ones in one pass on the event loop.

Link dedupe keys (`origin:<group>:<seq>`) are not application keys: they are dropped
when the sending group says it can no longer resend (forget notices).

The fingerprint is SHA-256 cut to 16 bytes, and a stored value says so in a last
byte (FINGERPRINT_SHA256). Why: every put with a key hashes its body, and BLAKE2b
took 1.8 µs per KiB here against 0.9 µs for SHA-256, which the CPU computes in
hardware (SHA-NI): ~5% of the server's CPU per replayed put (benchmarks/README.md, `mrs jplay`).
Values written before (32 bytes, no last byte) hold a BLAKE2b fingerprint; a put
meeting one is compared by BLAKE2b, so a retry across an upgrade is still answered
with the first copy's seq, not refused KEY_REUSED.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from journals import Journal
from journals.protocol import Store
from mrs.limits import DEDUPE_PURGE_BATCH_MAX, DEDUPE_PURGE_SCAN_MAX
from mrs.limits import DEDUPE_PURGE_INTERVAL_S as PURGE_INTERVAL_S  # noqa: F401 (old name)
from mrs.model import Address

APP_PREFIX = "app:"
ORIGIN_PREFIX = "origin:"
_VALUE = struct.Struct(">QQ16sB")
"""seq, window end (ns since the epoch), body fingerprint, its algorithm."""
_VALUE_BLAKE2B = struct.Struct(">QQ16s")
"""A value written before the algorithm byte: its fingerprint is BLAKE2b's."""
_U64 = struct.Struct(">Q")
_APP = APP_PREFIX.encode()
_ORIGIN = ORIGIN_PREFIX.encode()
_SCAN_BYTES_MAX = 1 << 62
"""A sweep's step is bounded by its count of keys, not their bytes."""
FINGERPRINT_BLAKE2B = 1
FINGERPRINT_SHA256 = 2


def scoped_key(source: Address, target: Address, key: str) -> str:
    return f"{APP_PREFIX}{source}>{target}:{key}"


def origin_key(peer_id: int, seq: int) -> str:
    """The link dedupe key of message `seq` of group `peer_id`: stored with the
    message (mrs.group.inbound), deleted on the peer's forget notice (mrs.group.notices)."""
    return f"{ORIGIN_PREFIX}{peer_id}:{seq}"


def fingerprint(body: bytes | bytearray | memoryview | None) -> bytes:
    """The body's fingerprint as values are written now (FINGERPRINT_SHA256)."""
    return hashlib.sha256(body or b"").digest()[:16]


def blake2b_fingerprint(body: bytes | bytearray | memoryview | None) -> bytes:
    """The fingerprint values written before FINGERPRINT_SHA256 hold."""
    return hashlib.blake2b(body or b"", digest_size=16).digest()


def pack_value(seq: int, expires_ns: int, digest: bytes) -> bytes:
    return _VALUE.pack(seq, expires_ns, digest, FINGERPRINT_SHA256)


def unpack_value(value: bytes) -> tuple[int, int | None, bytes | None, int]:
    """(seq, window end or None, fingerprint or None, its algorithm; 0 without one):
    link keys hold only a seq."""
    if len(value) == _VALUE.size:
        return _VALUE.unpack(value)
    if len(value) == _VALUE_BLAKE2B.size:
        return (*_VALUE_BLAKE2B.unpack(value), FINGERPRINT_BLAKE2B)
    return _U64.unpack(value[:8])[0], None, None, 0


def same_body(stored: bytes | None, algorithm: int, digest: bytes, body: bytes | None) -> bool:
    """Whether a stored fingerprint is that of `body`, whose fingerprint now is
    `digest` (a value without one, a link key's, matches any body)."""
    if stored is None:
        return True
    if algorithm == FINGERPRINT_BLAKE2B:
        return stored == blake2b_fingerprint(body)
    return stored == digest


@dataclass
class AppKeys:
    """The group's view of application keys: what is stored, what is in flight."""

    store: Store
    window_s: float
    clock_ns: Callable[[], int]
    inflight: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    """Key -> (body fingerprint, seq) of a first copy not yet durable."""
    _checked: tuple | None = field(default=None, repr=False)
    """(key, body, fingerprint, lookup result) of the put `conflict` just checked:
    the store of that same put (`digest_of`, `lookup`, in the same synchronous pass,
    so no commit can come between) reuses them instead of hashing the body and
    reading the key again. Taken by the next lookup, whichever key it asks for."""
    _ahead: dict[str, bytes | None] = field(default_factory=dict, repr=False)
    """Key -> stored value (None: absent), read by `read_ahead` in one transaction for
    the synchronous pass that looks them up (a link transfer's origin keys): each
    `_read` of one of them takes it from here instead of a read transaction of its
    own. `end_read_ahead` empties it when that pass ends, before any commit can
    change a key; within the pass a key being stored is in the DQF's in-flight keys,
    which are asked first."""

    def value(self, seq: int, digest: bytes) -> bytes:
        return pack_value(seq, self.clock_ns() + int(self.window_s * 1e9), digest)

    def digest_of(self, body: bytes | None) -> bytes:
        """The body's fingerprint: the one `conflict` computed for this very body
        object, or a fresh one."""
        checked = self._checked
        if checked is not None and checked[1] is body:
            return checked[2]
        return fingerprint(body)

    def lookup(self, key: str, digest: bytes, body: bytes | None) -> tuple[int, bool] | None:
        """For a key stored and live: (first copy's seq, same body?); None if absent,
        expired (the new put stores under it again) or in flight. `digest` is
        `body`'s fingerprint."""
        checked, self._checked = self._checked, None
        if checked is not None and checked[0] == key and checked[2] == digest:
            return checked[3]
        return self._read(key, digest, body)

    def stored_seq(self, key: str, body: bytes) -> int | None:
        """The seq of the live first copy of `key` with this body that `conflict` has
        just found, or None (asked right after `conflict(key, body)`, which read it);
        or of a first copy with this body still being stored. Why the second: an AK
        copy re-sent while its first copy's commit ran (a slow disk) was answered with
        a seq of its own that no message took and no MRS_ACK named."""
        flying = self.inflight.get(key)
        if flying is not None:
            return flying[1] if flying[0] == fingerprint(body) else None
        checked = self._checked
        if checked is None or checked[0] != key or checked[1] is not body:
            return None
        found = checked[3]
        return found[0] if found is not None and found[1] else None

    def read_ahead(self, keys: list[str]) -> None:
        """Read `keys` for the lookups of this synchronous pass, in one transaction:
        a read transaction per key was about 5% of a drained message's CPU
        (benchmarks/README.md). Pair with `end_read_ahead` (try/finally)."""
        values = self.store.get_raw_many(Journal.DEDUPE, [key.encode() for key in keys])
        self._ahead = dict(zip(keys, values, strict=True))

    def end_read_ahead(self) -> None:
        self._ahead = {}

    def _read(self, key: str, digest: bytes, body: bytes | None) -> tuple[int, bool] | None:
        ahead = self._ahead
        raw = ahead.pop(key) if key in ahead else self.store.get_raw(Journal.DEDUPE, key.encode())
        if raw is None:
            return None
        seq, expires_ns, stored_digest, algorithm = unpack_value(raw)
        if expires_ns is not None and expires_ns <= self.clock_ns():
            return None
        return seq, same_body(stored_digest, algorithm, digest, body)

    def conflict(self, key: str, body: bytes) -> str | None:
        """Why a put reusing `key` must be refused (another body), or None."""
        digest = fingerprint(body)
        inflight = self.inflight.get(key)
        if inflight is not None:
            same = inflight[0] == digest
            seq_text = "a put still in flight"
        else:
            found = self._read(key, digest, body)
            self._checked = (key, body, digest, found)
            if found is None:
                return None
            seq, same = found
            seq_text = f"seq {seq}"
        if same:
            return None
        scope, _, name = key[len(APP_PREFIX) :].partition(":")
        return (
            f"idempotency key {name!r} (sender>target {scope}) was already used for "
            f"another body ({seq_text}) within the dedupe window"
        )

    def expired(
        self, after: bytes | None = None, count_max: int = DEDUPE_PURGE_BATCH_MAX
    ) -> tuple[list[bytes], bytes | None]:
        """One step of a sweep of the keys in key order: the keys to delete (expired
        application keys, and unscoped keys of the old format, which can no longer match
        any put), at most `count_max`, among at most DEDUPE_PURGE_SCAN_MAX keys after
        `after` (None: from the first); and the last key looked at, where the next step
        goes on (None: this step reached the last key)."""
        now_ns = self.clock_ns()
        stale: list[bytes] = []
        items = self.store.items_after(
            Journal.DEDUPE, b"", after, DEDUPE_PURGE_SCAN_MAX, _SCAN_BYTES_MAX
        )
        inflight = self.inflight
        for key, value in items:
            name = bytes(key)
            if name.startswith(_ORIGIN):
                continue
            if name.startswith(_APP):
                _, expires_ns, _, _ = unpack_value(bytes(value))
                if expires_ns is not None and expires_ns > now_ns:
                    continue
                if inflight and name.decode(errors="replace") in inflight:
                    continue  # stored again under way: the put's commit writes it anew
            stale.append(name)
            if len(stale) >= count_max:
                return stale, name
        if len(items) < DEDUPE_PURGE_SCAN_MAX:
            return stale, None
        return stale, bytes(items[-1][0])
