"""The three guarantees every run is judged by: nothing stored lost, duplicates marked, order kept.

`check_delivered` is shared by the swarm's checker (`sim.checker.check`), the crash
and link-fault tests and `mrs demo`, so the rule is written once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from mrs.model import Status


@dataclass
class DeliveryCheck:
    """The three guarantees every run is judged by — the swarm (via `check`), the crash
    and link-fault tests and `mrs demo`: nothing acknowledged as stored is lost, a
    stored message delivered again is marked POSSDUPL, and each sender's messages
    arrive in the order sent (on in-order queues)."""

    acknowledged: int = 0
    delivered: int = 0
    lost: list[str] = field(default_factory=list)
    unmarked_duplicates: list[str] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    marked_redeliveries: int = 0
    """Deliveries marked POSSDUPL (allowed: handed out before a failure, unconfirmed)."""
    resent_copies: int = 0
    """A message id stored again as another message (a resend after a lost answer)."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unmarked_duplicates or self.order_violations) and not (
            self.unexpected
        )

    def failures(self) -> str:
        """One line per broken guarantee, with a few examples ('' when ok)."""
        lines = []
        for name in ("lost", "unmarked_duplicates", "order_violations", "unexpected"):
            found = getattr(self, name)
            if found:
                lines.append(f"{name}: {len(found)}, e.g. {sorted(map(str, found))[:5]}")
        return "\n".join(lines)


def producer_and_counter(message_id: str) -> tuple[str, int]:
    """The message ids runs use, "<producer>:<counter>": who sent it, and its number."""
    producer, _, counter = message_id.rpartition(":")
    return producer, int(counter)


def order_violations(
    first_delivery: dict[str, int], stream_of: Callable[[str], tuple[str, int] | None]
) -> list[str]:
    """Streams whose messages were first delivered out of their counters' order.
    `stream_of(message_id)` is (stream name, counter), or None for no order promise."""
    by_stream: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for message_id, position in first_delivery.items():
        stream = stream_of(message_id)
        if stream is not None:
            by_stream[stream[0]].append((position, stream[1]))
    violations = []
    for name, items in by_stream.items():
        counters = [counter for _, counter in sorted(items)]
        if counters != sorted(counters):
            violations.append(name)
    return violations


def check_delivered(
    acknowledged: Iterable[str],
    deliveries: Iterable[tuple[str, int] | tuple[str, int, object]],
    *,
    sent: Collection[str] | None = None,
    stream_of: Callable[[str], tuple[str, int] | None] = producer_and_counter,
) -> DeliveryCheck:
    """Judge deliveries (message id, delivery status[, the stored message's identity,
    e.g. its seq]) in the order receivers got them against the ids acknowledged as
    stored. Without an identity, a message id delivered twice is one stored message
    delivered twice; with one, the same id under another identity is a resend."""
    result = DeliveryCheck()
    first_delivery: dict[str, int] = {}
    identities_seen: set[object] = set()
    for position, (message_id, status, *identity) in enumerate(deliveries):
        stored = identity[0] if identity else message_id
        if sent is not None and message_id not in sent:
            result.unexpected.append(message_id)
            continue
        if int(status) == int(Status.POSSDUPL):
            result.marked_redeliveries += 1
        if stored in identities_seen:
            if int(status) != int(Status.POSSDUPL):
                result.unmarked_duplicates.append(message_id)
        elif message_id in first_delivery:
            result.resent_copies += 1
        identities_seen.add(stored)
        first_delivery.setdefault(message_id, position)
    acknowledged = set(acknowledged)
    result.acknowledged = len(acknowledged)
    result.delivered = len(first_delivery)
    result.lost = sorted(acknowledged - first_delivery.keys())
    result.order_violations = order_violations(first_delivery, stream_of)
    return result
