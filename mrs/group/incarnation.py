"""Which journals a peer group's messages come from: the incarnation in a link's Hello.

Why: a receiving group dedupes a transferred message by (origin group, seq)
(mrs.group.idempotency.origin_key). Two processes serving one group id from two data
directories (a copied config block, a group started by hand on a second host) both
count their seqs from the same start; the receiver took the second one's messages for
resends of the first's, answered them stored and kept none of them: acknowledged
messages lost, silently. A group whose data directory was replaced (a host rebuilt
without a replicated group) meets the dedupe keys its old journals left behind.

So a group's journals carry an incarnation: 16 random bytes in META, written by their
first start and replicated with them (every instance of a replicated group has the
same one). A link's Hello and Welcome carry it. Each side records the first one it
meets for each peer (after the peer's identity and credentials were checked) and
refuses a link that brings another one, or none once one was recorded, with one line
saying what to do: as IBM MQ refuses a channel whose sequence numbers do not match
until an operator resets it.
The reset is `mrs admin reset-link PEER` on the refusing group (mrs.ops.link_reset):
it drops the record and the old journals' dedupe keys, and the next link records the
new incarnation. Nothing is lost while the link is refused: what either side would
send waits in its SAF. A peer of an older release sends none and is not checked, as
long as its links never brought one: no group goes back to an earlier release, so
a link without one from a peer that did is not that peer (`PeerIncarnations.admit`),
on either side (a dialer falls back to an earlier release's Hello only for a peer
never met with one: mrs.group.link_driver).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Final

from journals import Journal, WriteBatch
from mrs.group.idempotency import ORIGIN_PREFIX
from mrs.limits import LINK_RESET_KEYS_BATCH_MAX

INCARNATION_KEY: Final = "incarnation"
"""META: this group's journals' incarnation."""
PEER_INCARNATION_PREFIX: Final = "peer_incarnation:"
"""META: `peer_incarnation:<group id>` -> the incarnation first met on a link from it."""
PEER_TERM_PREFIX: Final = "peer_term:"
"""META: `peer_term:<group id>` -> the highest term a replicated peer's link Hello (or
Welcome) said."""
INCARNATION_BYTES: Final = 16


def own_incarnation(store: Any) -> bytes:
    """The incarnation of the journals in `store`, written by the first call on them."""
    recorded = store.meta_get(INCARNATION_KEY)
    if recorded is not None:
        return bytes(recorded)
    incarnation = os.urandom(INCARNATION_BYTES)
    store.commit_now(
        WriteBatch.empty().put_raw(Journal.META, INCARNATION_KEY.encode(), incarnation)
    )
    return incarnation


def short(incarnation: bytes) -> str:
    """An incarnation as log lines name it: enough hex to tell two apart."""
    return incarnation.hex()[:12]


@dataclass
class PeerIncarnations:
    """The incarnations this group met on its links, kept in its journals (`store`)."""

    store: Any
    group_id: int
    own: bytes
    """This group's incarnation, sent in its Hello or Welcome."""
    config_path: str = "bus.toml"
    """The bus file, named in the command a refusal tells the operator to run."""
    term: int = 0
    """This group's active's term (a replicated group's; 0: unreplicated), said in
    its link Hello, and in its link Welcome to a dialer that asks for it."""
    refused: dict[int, bytes] = field(default_factory=dict)
    """The peers whose link this process refused for their journals since it started
    and has not admitted since, each with the incarnation it brought (b"": none): a
    reset forgets one of these without `force` (`may_reset`)."""

    def admit(self, peer_id: int, incarnation: bytes, *, linked: bool = False) -> str | None:
        """None when a link from `peer_id` bringing `incarnation` may go on (a first
        one is recorded now, durably); else the refusal, one line. An empty `incarnation`
        (an earlier release's link) goes on only while none is recorded for `peer_id`.
        A refusal is noted for `may_reset` unless `linked` (the peer's link is up on
        its recorded journals: what was refused is a stray process beside it)."""
        problem = self._admission(peer_id, incarnation)
        if problem is None:
            self.refused.pop(peer_id, None)
        elif not linked:
            self.refused[peer_id] = incarnation
        return problem

    def note_refused(self, peer_id: int, incarnation: bytes = b"") -> None:
        """A link to `peer_id` was refused for its journals elsewhere than `admit` (a
        refusal worded as an earlier release's from a peer that brought an incarnation
        before: mrs.group.link_driver `_refusal`): a reset may forget it."""
        self.refused[peer_id] = incarnation

    def may_reset(self, peer_id: int) -> bool:
        """Whether `peer_id`'s link was refused for its journals since this process
        started, and not admitted since. Why: a reset deletes the dedupe keys of the
        peer's messages; a peer merely stopped, cut off or restarting keeps its
        journals and resends from its SAF what this group stored before its answer
        arrived: with the keys gone, each was stored and delivered again, unmarked."""
        return peer_id in self.refused

    def _admission(self, peer_id: int, incarnation: bytes) -> str | None:
        """`admit`'s rule, recording a first incarnation."""
        key = _peer_key(peer_id)
        recorded = self.store.meta_get(key)
        if not incarnation:
            return None if recorded is None else self._said_none(peer_id, bytes(recorded))
        if recorded is None:
            self.store.commit_now(
                WriteBatch.empty().put_raw(Journal.META, key.encode(), incarnation)
            )
            return None
        if bytes(recorded) == incarnation:
            return None
        return (
            f"group {peer_id}'s journals (incarnation {short(incarnation)}) are not the ones "
            f"group {self.group_id} linked with before ({short(bytes(recorded))}): another "
            f"process serves group {peer_id} from other journals, or its data directory was "
            f"replaced. Stop a stray process; if group {peer_id} was rebuilt, run `mrs admin "
            f"reset-link {peer_id} --config {self.config_path} --group {self.group_id}`. "
            "Nothing waiting is lost meanwhile"
        )

    def admit_term(self, peer_id: int, term: int, instance: str = "dialing") -> str | None:
        """None when a link Hello (or Welcome) from `peer_id` saying `term` may go on (a
        higher term than any met is recorded now, durably); else the refusal, one line
        (`instance`: which of the peer's instances said it, "dialing" or "that
        welcomed this link").

        Why: a replicated peer's old active that outlived its lease (paused, its
        clock slow, cut off) still holds the SAF records its successor drained here
        and deleted; told by the successor that they are gone ("forget" notices),
        this group drops their dedupe keys, and once they are confirmed nothing here
        knows them. The old active's link, coming back before it learns it lost its
        lease, drained them again: stored and delivered a second time, unmarked
        (`mrs sim swarm --replicated --seed 52113`); the same when the old active
        accepts the link of a lower-numbered group (its Welcome says its term). A
        term is a fencing token: the old active's is below its successor's. 0 (an
        unreplicated group, or one of an earlier release) is not checked."""
        if term <= 0:
            return None
        key = f"{PEER_TERM_PREFIX}{peer_id}"
        recorded = self.store.meta_get(key)
        highest = int(bytes(recorded).decode()) if recorded is not None else 0
        if term >= highest:
            if term > highest:
                self.store.commit_now(
                    WriteBatch.empty().put_raw(Journal.META, key.encode(), str(term).encode())
                )
            return None
        return (
            f"group {peer_id}'s instance {instance} is the active of term {term}, but group "
            f"{peer_id}'s term {highest} linked here since: an old active that lost its "
            "lease, refused (what it would send, its successor sent)"
        )

    def _said_none(self, peer_id: int, recorded: bytes) -> str:
        """The refusal of a link (a Hello or a Welcome) that says no incarnation from a
        peer whose links brought one before. Why: a group of this release always says
        it, and no group goes back to an earlier release (docs/operations.md), so what
        leaves it out is not the group this one linked with (an earlier release's
        process started by mistake on other journals, whatever answers or dials in
        its name); taken for an earlier release, as before, it replaced the real
        link's connection with its journals unchecked."""
        return (
            f"group {peer_id} said no journals' incarnation, but its links brought one "
            f"before ({short(recorded)}): a group of this release says it, and none goes "
            f"back to an earlier release. Stop whatever dials or answers as group "
            f"{peer_id}; if group {peer_id} was really taken back to an earlier release, "
            f"run `mrs admin reset-link {peer_id} --config {self.config_path} --group "
            f"{self.group_id}`. Nothing waiting is lost meanwhile"
        )

    def recorded(self, peer_id: int) -> bytes | None:
        """The incarnation recorded for `peer_id` (None if its links never brought one)."""
        recorded = self.store.meta_get(_peer_key(peer_id))
        return None if recorded is None else bytes(recorded)

    def reset(self, peer_id: int) -> tuple[bytes | None, int]:
        """Forget `peer_id`'s recorded incarnation (and term), and the dedupe keys of its
        messages (they name seqs of journals that are gone): the incarnation forgotten
        (None if none was recorded) and how many keys were deleted. In batches, each
        one commit: a crash between them leaves keys a second reset deletes."""
        key = _peer_key(peer_id)
        recorded = self.store.meta_get(key)
        prefix = f"{ORIGIN_PREFIX}{peer_id}:".encode()
        deleted = 0
        while True:
            items = self.store.items_after(
                Journal.DEDUPE, prefix, None, LINK_RESET_KEYS_BATCH_MAX, 1 << 30
            )
            if not items:
                break
            batch = WriteBatch.empty()
            for dedupe_key, _ in items:
                batch.delete(Journal.DEDUPE, bytes(dedupe_key))
            self.store.commit_now(batch)
            deleted += len(items)
        self.store.commit_now(
            WriteBatch.empty()
            .delete(Journal.META, key.encode())
            .delete(Journal.META, f"{PEER_TERM_PREFIX}{peer_id}".encode())
        )
        self.refused.pop(peer_id, None)
        return (None if recorded is None else bytes(recorded)), deleted


def _peer_key(peer_id: int) -> str:
    return f"{PEER_INCARNATION_PREFIX}{peer_id}"
