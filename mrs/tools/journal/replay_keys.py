"""What each replayed put carries: its idempotency key and the headers saying what it replays.

The key is `replay:<HMAC(ledger secret, journal:group:seq:gen)>`: the same on every
run, so a re-run after a crash dedupes, but unguessable without the ledger's secret.
"""

from __future__ import annotations

import hashlib
import hmac

from journals import Journal, Record
from mrs.records import IDEMPOTENCY_HEADER
from mrs.tools.journal.render import status_name


def replay_headers(
    record: Record, journal: Journal, group_id: int, gen: int, secret: bytes = b""
) -> dict:
    """The original headers plus where the message comes from, so a receiver can tell
    a replay (and which one) from an original, and the idempotency key."""
    extra = record.extra if isinstance(record.extra, dict) else {}
    headers = extra.get("headers")
    original = dict(headers) if isinstance(headers, dict) else {}
    replay = {
        "journal": journal.value,
        "group": group_id,
        "seq": record.seq,
        "source": f"{record.source_group}.{record.source_queue}",
        "target": f"{record.target_group}.{record.target_queue}",
        "put_time_ns": record.put_time_ns,
        "confirm_value": record.confirm_value,
        "confirm_time_ns": record.confirm_time_ns,
        "generation": gen,
    }
    if journal is Journal.DLJ:
        replay["reason"] = record.reason
        replay["reason_name"] = status_name(record.reason)
    if "replay" in original:
        replay["previous"] = original["replay"]
    original["replay"] = replay
    original[IDEMPOTENCY_HEADER] = replay_key(secret, journal, group_id, record.seq, gen)
    return original


def replay_key(secret: bytes, journal: Journal, group_id: int, seq: int, gen: int) -> str:
    """The idempotency key of one replay: the same on every run (so a re-run dedupes)
    but unguessable without the ledger's secret, so no other client can claim it first
    and make the replay vanish. HMAC-SHA256, from a keyed state made once per secret."""
    keyed = _KEYED.get(secret)
    if keyed is None:
        if len(_KEYED) >= 8:  # one secret per ledger: a handful at most
            _KEYED.clear()
        keyed = _KEYED[secret] = hmac.new(secret, digestmod=hashlib.sha256)
    mac = keyed.copy()
    mac.update(f"{journal.value}:{group_id}:{seq}:{gen}".encode())
    return "replay:" + mac.hexdigest()[:32]


_KEYED: dict[bytes, hmac.HMAC] = {}
"""Secret -> its keyed HMAC state: copying it skips re-keying for every record."""
