"""Builds broken on purpose, one promise each, so the checker can be shown to catch them.

Why here: a checker that never fails proves nothing, so the simulator runs builds
that break a promise (docs/sim.md, "Proving the checker"). The server itself has no
fault switch: each broken build is a `Guarantees` part (mrs.group.guarantees) that
keeps every rule of the part it wraps but one, and a harness hands it to the group
by constructor. `mrs serve` resolves the words of MRS_HARNESS_UNSAFE here (the CLI
edge, mrs.tools.cli), `mrs sim swarm --unsafe` and `sim.swarm.run_seed` do the same;
the production layers never import this module.

Layer: testing (top, beside `tools`): may import everything below it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, ClassVar, Final

from journals import WriteBatch
from mrs.core.delivery import CONF_POINT, CONFIRMREQ, POSSDUPL
from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.group import KEPT, Guarantees
from mrs.group.context import Outcome
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.model import Psb, Status

if TYPE_CHECKING:
    from mrs.group.dqf import Dqf
    from mrs.group.reply import PutReply

UNSAFE_ENV: Final = "MRS_HARNESS_UNSAFE"
"""The environment variable `mrs serve` reads the switches from (comma-separated)."""

UNSAFE_ACK_BEFORE_COMMIT: Final = "ack-before-commit"
UNSAFE_SKIP_POSSDUPL: Final = "skip-possdupl"
UNSAFE_POSSDUPL_ALWAYS: Final = "possdupl-always"
UNSAFE_CONFIRM_WITHOUT_DELETE: Final = "confirm-without-delete"
UNSAFE_FORGET_UNCONFIRMED_ON_DETACH: Final = "forget-unconfirmed-on-detach"


class Departure:
    """Keeps every rule of the part it wraps (`kept`) but the one a subclass replaces,
    so switches combine: each wraps the build made so far."""

    switch: ClassVar[str]

    def __init__(self, kept: Guarantees) -> None:
        self.kept = kept
        self.broken: frozenset[str] = kept.broken | {self.switch}

    def delivery_status(self, queue: TargetQueue, entry: Entry) -> tuple[int, bool]:
        return self.kept.delivery_status(queue, entry)

    def confirm_writes(self, batch: WriteBatch, key: bytes) -> None:
        self.kept.confirm_writes(batch, key)

    def detach(self, queue: TargetQueue) -> list[Entry]:
        return self.kept.detach(queue)

    def store(
        self, dqf: Dqf, entry: Entry, keys: list[str], reply: PutReply, outcome: Outcome
    ) -> None:
        self.kept.store(dqf, entry, keys, reply, outcome)


class AckBeforeCommit(Departure):
    """A recoverable put is answered STORED before its commit: caught as lost."""

    switch = UNSAFE_ACK_BEFORE_COMMIT

    def store(
        self, dqf: Dqf, entry: Entry, keys: list[str], reply: PutReply, outcome: Outcome
    ) -> None:
        if entry.delivery.interest_point is not CONF_POINT:
            reply.report(Psb(Status.SUCCESS, Status.STORED, entry.seq, Status.NO_UMA))
        self.kept.store(dqf, entry, keys, reply, outcome)


class SkipPossdupl(Departure):
    """Redeliveries are marked CONFIRMREQ: caught as unmarked duplicates."""

    switch = UNSAFE_SKIP_POSSDUPL

    def delivery_status(self, queue: TargetQueue, entry: Entry) -> tuple[int, bool]:
        status, needs_confirm = self.kept.delivery_status(queue, entry)
        return (CONFIRMREQ if status == POSSDUPL else status), needs_confirm


class PossduplAlways(Departure):
    """Every first delivery is marked POSSDUPL: caught as marked first deliveries."""

    switch = UNSAFE_POSSDUPL_ALWAYS

    def delivery_status(self, queue: TargetQueue, entry: Entry) -> tuple[int, bool]:
        status, needs_confirm = self.kept.delivery_status(queue, entry)
        return (POSSDUPL if status == CONFIRMREQ else status), needs_confirm


class ConfirmWithoutDelete(Departure):
    """A confirm is answered but its message stays in the DQF: caught as redelivered
    after its confirm, or stuck."""

    switch = UNSAFE_CONFIRM_WITHOUT_DELETE

    def confirm_writes(self, batch: WriteBatch, key: bytes) -> None:
        return None


class ForgetUnconfirmedOnDetach(Departure):
    """A consumer's unconfirmed messages are dropped when it leaves: caught as
    unconfirmed lost, and stuck (they stay in the DQF, never handed out again)."""

    switch = UNSAFE_FORGET_UNCONFIRMED_ON_DETACH

    def detach(self, queue: TargetQueue) -> list[Entry]:
        returned = self.kept.detach(queue)
        for entry in returned:
            queue.drop_pending(entry)
        return returned


BROKEN_BUILDS: Final[tuple[type[Departure], ...]] = (
    AckBeforeCommit,
    SkipPossdupl,
    PossduplAlways,
    ConfirmWithoutDelete,
    ForgetUnconfirmedOnDetach,
)
"""Every broken build, in the order they wrap one another when combined."""

UNSAFE_SWITCHES: Final = frozenset(build.switch for build in BROKEN_BUILDS)


def broken_build(
    switches: Iterable[str], where: str = "--unsafe", also_known: Iterable[str] = ()
) -> Guarantees:
    """The part that breaks each promise named in `switches` (KEPT for none); an
    unknown word is refused in one line naming `where` it came from and the switches
    there are (`also_known`: others the caller takes, e.g. the replication builds),
    since neither `--help` nor the message listed them and a typo sent the tester
    to the docs."""
    words = frozenset(switches)
    unknown = words - UNSAFE_SWITCHES
    if unknown:
        known = ", ".join(sorted(UNSAFE_SWITCHES | frozenset(also_known)))
        raise CommandError(
            f"{where}: unknown switches {sorted(unknown)} (known: {known})", EXIT_USAGE
        )
    part: Guarantees = KEPT
    for build in BROKEN_BUILDS:
        if build.switch in words:
            part = build(part)
    return part


def switches_in(text: str) -> frozenset[str]:
    """The words of a comma-separated list of switches (empty ones skipped)."""
    return frozenset(filter(None, text.split(",")))


def broken_build_from(environ: Mapping[str, str]) -> Guarantees:
    """The build MRS_HARNESS_UNSAFE asks for: KEPT when it is unset or empty."""
    return broken_build(switches_in(environ.get(UNSAFE_ENV, "")), UNSAFE_ENV)
