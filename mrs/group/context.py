"""The state every room of a group shares: config, store, writer, timers, clock, counters.

Why one object: the rooms (sequence, DQF, UMAs, hand-over, outbound, drain,
inbound, notices) each do one job over the same journals and queues. They take
this context instead of reaching into each other through a god object; what one
room needs of another it is given explicitly when the group is wired (mrs.group.wiring).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from journals import GroupCommitWriter, InlineWriter
from journals.protocol import Store
from mrs.config.bus import BusConfig, GroupConfig
from mrs.config.schema import Limits
from mrs.core.delivery import Refused
from mrs.group.journal_counts import JournalCounts
from mrs.group.queues import TargetQueue
from mrs.limits import BODIES_IN_MEMORY_PER_QUEUE_MAX as BODIES_IN_MEMORY_PER_QUEUE_MAX
from mrs.model import Address, Status

log = logging.getLogger("mrs.group")

U32 = struct.Struct(">I")
PACK_U32: Final = U32.pack
UNPACK_U32: Final = U32.unpack
"""A delivery mark's count, packed and read per message: C statics (benchmarks/README.md)."""
U64 = struct.Struct(">Q")

Outcome = Callable[[Status, int, str], None]
"""outcome(status, stored_seq, reason) of storing one message in the DQF."""


class Session(Protocol):
    id: int
    attached: TargetQueue | None

    def send(self, event: object) -> None: ...

    def answer(self, event: object) -> None:
        """Send a PutDone or Confirmed, perhaps in one frame with others ready now."""
        ...


class Timers(Protocol):
    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run callback after delay_s; returns a function that cancels it."""
        ...


@dataclass(eq=False)
class GroupContext:
    """What the rooms of one group share (no behaviour beyond lookups)."""

    bus: BusConfig
    config: GroupConfig
    store: Store
    """The LMDB store, or any other `journals.protocol.Store` (the simulator's)."""
    writer: GroupCommitWriter | InlineWriter
    timers: Timers
    clock_ns: Callable[[], int] = time.time_ns
    queues: dict[int, TargetQueue] = field(default_factory=dict)
    counts: JournalCounts = field(default_factory=JournalCounts)
    """Records in the DQF, SAF and DLJ (their one owner: mrs.group.journal_counts)."""
    corrupt: list[str] = field(default_factory=list)
    quarantined: int = 0
    """Messages moved to the DLJ because they could not be delivered (mrs.group.quarantine)."""
    epoch: int = 0
    """How many times this group has started (status and logs; not part of seqs)."""
    _resolved: _ResolvedCache = field(default_factory=lambda: _ResolvedCache(None))
    group_id: int = field(init=False, default=0)
    limits: Limits = field(init=False)
    pcj_default: bool = field(init=False, default=False)
    """`config.id`, `config.limits` and `config.pcj_default`, read per message: held
    here natively, each was a generic attribute lookup through the interpreted
    config (benchmarks/README.md). The config does not change while the group runs;
    `pcj_default` does, set by MRS_SET_PCJ (mrs.group.pcj_control)."""
    pcj_segment: int = field(init=False, default=0)
    """The PCJ segment confirmations are journaled in (mrs.group.pcj_control)."""

    def __post_init__(self) -> None:
        self.group_id = self.config.id
        self.limits = self.config.limits
        self.pcj_default = self.config.pcj_default
        for queue_config in self.config.queues.values():
            address = Address(self.config.id, queue_config.id)
            self.queues[queue_config.id] = TargetQueue(queue_config, address)

    def resolve(self, text: str) -> Address:
        """A queue name or address as an Address on this bus, or Refused NOSUCHQUEUE.

        Cached per text (every put resolves its target and response queue; parsing
        them showed in profiles), for this bus config only, at most
        RESOLVED_CACHE_MAX texts; refusals are not cached."""
        cache = self._resolved
        if cache.bus is not self.bus:
            cache.reset(self.bus)
        address = cache.addresses.get(text)
        if address is not None:
            return address
        address = self._resolve_uncached(text)
        cache.remember(text, address)
        return address

    def _resolve_uncached(self, text: str) -> Address:
        try:
            address = self.bus.resolve(text, self.config.id)
        except (LookupError, ValueError) as error:
            raise lookup_refusal(text, error) from None
        if address.group not in self.bus.groups:
            raise Refused(Status.NOSUCHQUEUE, f"no group {address.group} on this bus")
        return address

    def report_corrupt(
        self, corrupt: object, what: str = "not delivered", once: bool = False
    ) -> None:
        """Note a record that does not decode (status shows it) and log it (`once`:
        unless already noted, for a record read again and again, as the SAF drain does)."""
        if once and str(corrupt) in self.corrupt:
            return
        self.corrupt.append(str(corrupt))
        log.error("%s; left in place, %s", corrupt, what)


RESOLVED_CACHE_MAX = 4096
"""Distinct address texts remembered; a client cycling through more only costs the
parse again (the cache starts over when full)."""


@dataclass(eq=False, slots=True)
class _ResolvedCache:
    bus: BusConfig | None
    addresses: dict[str, Address] = field(default_factory=dict)

    def reset(self, bus: BusConfig) -> None:
        self.bus = bus
        self.addresses = {}

    def remember(self, text: str, address: Address) -> None:
        if len(self.addresses) >= RESOLVED_CACHE_MAX:
            self.addresses = {}
        self.addresses[text] = address


def attached_queue(session: Session) -> TargetQueue:
    if session.attached is None:
        raise Refused(Status.NOTATTACHED, "attach to a queue first")
    return session.attached


def lookup_refusal(text: str, error: LookupError | ValueError) -> Refused:
    """NOSUCHQUEUE for `text`, which `bus.resolve` refused with `error`: a put's
    target, an attach and a locate say the same words ("queue 0 out of range" was
    "no queue named '1.0'" from locate). The lookup's text lists the group's queue
    names and the config path: an operator's detail (Refused.detail, for the status
    right and everyone with auth off, docs/security-auth.md), not every caller's."""
    # its first argument, not str(): a KeyError's str() is quoted, and stripping
    # quotes off the text took the closing one of "in address '1.0'"
    detail = str(error.args[0]) if error.args else str(error)
    return Refused.detailed(Status.NOSUCHQUEUE, f"unknown queue {text!r}", detail)
