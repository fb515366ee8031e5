"""The idempotency keys of keyed puts waiting in this group's SAF for one peer group.

Why: a client that lost its connection before a put's answer re-sends the put under
its idempotency key, and the group answers the copy with the first copy's seq. For
another group's queue the receiving group holds the key, but only once the message
reaches it: while the link was down both copies went into this group's SAF, each
brought its own MRS_ACK (SAF_SUCCESS, then SAF_FORCED) and each was drained. Now a
copy whose first copy still waits in the SAF is answered as a copy here
(`PutReply.report_copy`), with no second SAF record and no second MRS_ACK; once the
first copy has left the SAF the receiver's key answers copies as before.

Bounded by the SAF (`saf_messages_max`): an entry is added with its SAF record and
dropped with it (`forget`, by the drain's deletions); `first_copy` also drops an
entry whose record is gone, whatever removed it. A copy that arrives while the first
copy's record is being written waits for that commit (at most DEDUPE_WAITERS_MAX
copies; beyond, QUEUE_BUSY), as a local copy does.

Once the peer has stored a keyed message (drained from the SAF, or sent directly), its
key is remembered here too (`delivered`: the newest SAF_KEYS_DELIVERED_MAX per peer,
for the peer's dedupe window). Why: a copy put while the link was down went into the
SAF (its UMA, or SAF_FORCED) and brought an MRS_ACK of its own, a second one for one
message and under a seq the peer never holds (the peer answered it as the copy it was
once drained). Now such a copy is answered with the first copy's seq here at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from journals import Record
from mrs.group.idempotency import fingerprint, scoped_key
from mrs.group.shapes import IDEMPOTENCY_HEADER, Entry, entry_from_record, idempotency_key
from mrs.limits import DEDUPE_WAITERS_MAX, SAF_KEYS_DELIVERED_MAX


def saf_key(entry: Entry) -> str | None:
    """The SAF copy key of a recoverable put for another group (`copy_key`), or None."""
    if not entry.headers or not entry.delivery.recoverable:
        return None
    key = idempotency_key(entry.headers)
    if key is None:
        return None
    return copy_key(scoped_key(entry.source, entry.target, key), entry.body)


def copy_key(scoped: str, body: bytes | None) -> str:
    """A scoped idempotency key with its body's fingerprint: only a put of the same key
    *and* body is a copy. Why: the same key with another body is refused KEY_REUSED by
    the group that holds the key (the receiving group), not answered as a copy here."""
    return f"{scoped}#{fingerprint(body).hex()}"


def record_saf_key(record: Record) -> str | None:
    """`saf_key` of a SAF record read back at start-up (most carry no key: not decoded)."""
    headers = record.extra.get("headers")
    if not headers or IDEMPOTENCY_HEADER not in headers:
        return None
    return saf_key(entry_from_record(record))


@dataclass(eq=False)
class SafKeys:
    seq_by_key: dict[str, int] = field(default_factory=dict)
    key_by_seq: dict[int, str] = field(default_factory=dict)
    writing: dict[int, list[Callable[[bool], None]]] = field(default_factory=dict)
    """Seq whose SAF record is being committed -> the copies waiting for it (each
    called with whether it became durable), as a local copy waits for its first
    copy's commit (mrs.group.dqf)."""
    copies_waiting: int = 0
    """Copies waiting in `writing`, at most DEDUPE_WAITERS_MAX (then `busy`)."""
    delivered: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)
    """Key -> (the seq the peer stored its message under, when: clock ns), oldest
    first, SAF_KEYS_DELIVERED_MAX at most (`stored_by_peer`)."""

    def add(self, key: str, seq: int, *, durable: bool) -> None:
        self.seq_by_key[key] = seq
        self.key_by_seq[seq] = key
        if not durable:
            self.writing[seq] = []

    def written(self, seq: int, ok: bool) -> None:
        """The SAF record of `seq` is durable (`ok`), or its write failed (forgotten):
        the copies waiting for it are told."""
        copies = self.writing.pop(seq, [])
        self.copies_waiting -= len(copies)
        if not ok:
            self.forget((seq,))
        for copy in copies:
            copy(ok)

    def wait(self, seq: int, copy: Callable[[bool], None]) -> None:
        """`copy(ok)` once the first copy's record `seq` (being written) is answered."""
        self.writing[seq].append(copy)
        self.copies_waiting += 1

    def stored_by_peer(self, key: str, seq: int, now_ns: int) -> None:
        """The peer stored the message of `key` under `seq` (its first copy's)."""
        self.delivered.pop(key, None)
        self.delivered[key] = (seq, now_ns)
        while len(self.delivered) > SAF_KEYS_DELIVERED_MAX:
            self.delivered.popitem(last=False)

    def drained(self, seqs: Iterable[int], now_ns: int) -> None:
        """SAF records the peer stored, about to be forgotten: their keys are kept in
        `delivered`."""
        for seq in seqs:
            key = self.key_by_seq.get(seq)
            if key is not None:
                self.stored_by_peer(key, seq, now_ns)

    def delivered_copy(self, key: str, now_ns: int, window_ns: int) -> int | None:
        """The seq the peer stored `key`'s first copy under, if it did within
        `window_ns` (its dedupe window: it forgets the key then), else None."""
        found = self.delivered.get(key)
        if found is None:
            return None
        if now_ns - found[1] > window_ns:
            del self.delivered[key]
            return None
        return found[0]

    def forget(self, seqs: Iterable[int]) -> None:
        """SAF records deleted (drained, dead-lettered, quarantined)."""
        if not self.key_by_seq:
            return
        for seq in seqs:
            key = self.key_by_seq.pop(seq, None)
            if key is not None and self.seq_by_key.get(key) == seq:
                del self.seq_by_key[key]

    def first_copy(self, key: str, still_held: Callable[[int], bool]) -> int | None:
        """The seq of the SAF record holding `key`'s first copy (maybe being written),
        or None."""
        seq = self.seq_by_key.get(key)
        if seq is None or seq in self.writing or still_held(seq):
            return seq
        self.forget((seq,))
        return None

    def busy(self, key: str) -> bool:
        """Whether a copy of `key` must be refused QUEUE_BUSY: its first copy is being
        written and DEDUPE_WAITERS_MAX copies wait already."""
        seq = self.seq_by_key.get(key)
        return seq in self.writing and self.copies_waiting >= DEDUPE_WAITERS_MAX
