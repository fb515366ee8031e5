"""What each replayed put carries: its idempotency key and the headers saying what it replays.

The key is `replay:<run>:<seq>:<tag>` (`replay_key`): the same on every run, so a re-run
after a crash dedupes, unguessable without the ledger's secret, and in put order.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from journals import Journal, Record
from mrs.group.shapes import IDEMPOTENCY_HEADER
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
    """The idempotency key of one replay: `replay:<run>:<seq>:<tag>`, the same on every
    run (so a re-run dedupes) but unguessable without the ledger's secret, so no other
    client can claim it first and make the replay vanish.

    `run` = MAC(run:journal:group:gen) and `tag` = MAC(tag:journal:group:seq:gen), 16 hex
    digits each, the MAC being BLAKE2b keyed with the secret (a MAC by design, one C
    call); `seq` is 16 hex digits. Why the seq in the clear: a replay's keys then sort
    in the order they are put, so the server appends them to its key journal instead
    of inserting each into a random page. Random keys dirtied a page per key per
    commit: 7.4 against 1.1 µs CPU per key stored, in commits of 1,000 (benchmarks/README.md,
    `mrs jplay` throughput). The tag keeps each key unguessable even to someone who
    saw another key of the same run."""
    head, tag_prefix = _per_run(secret, journal, group_id, gen)
    tag = tag_prefix.copy()
    tag.update(b"%d:%d" % (seq, gen))
    return f"{head}{seq:016x}:{tag.hexdigest()}"


@functools.lru_cache(maxsize=64)  # a few (journal, group, generation) per ledger at most
def _per_run(secret: bytes, journal: Journal, group_id: int, gen: int) -> tuple[str, Any]:
    """What every key of one run shares: its text up to the seq (`replay:<run>:`), and
    the MAC of a tag's text `tag:<scope>:` with that common prefix already taken in:
    each record's tag copies it and adds its own `<seq>:<gen>`. Why: a keyed BLAKE2b
    compresses a whole block for its key first, and the scope's text, the run's MAC
    and two cache lookups cost more than the record's own part (benchmarks/README.md, jplay:
    1.9 against 0.8 µs per key)."""
    scope = f"{journal.value}:{group_id}"
    tag_prefix = _keyed(secret)
    tag_prefix.update(f"tag:{scope}:".encode())
    return f"replay:{_mac(secret, f'run:{scope}:{gen}')}:", tag_prefix


def _mac(secret: bytes, text: str) -> str:
    mac = _keyed(secret)
    mac.update(text.encode())
    return mac.hexdigest()


def _keyed(secret: bytes) -> Any:
    if len(secret) > 64:  # BLAKE2b takes keys of up to 64 bytes (the ledger makes 32)
        secret = hashlib.blake2b(secret).digest()
    return hashlib.blake2b(key=secret, digest_size=8)
