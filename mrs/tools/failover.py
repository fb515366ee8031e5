"""`mrs failover --config BUS GROUP [--to NAME]`: a planned switch-over of a replicated
group's active instance.

Why through etcd and not a request to the active: the active already reads etcd every
TTL / 4 to renew its lease, so the request is one key it finds there
(`<prefix>/<group id>/failover`); no new protocol event, and it works whichever
instance is active. The active then commits a record the chosen replica must
acknowledge (proof it is there to take over), takes no new request, waits until the
commits of those it took are answered and on that replica, stops answering, records
the MRS_ACKs its clients have not yet got for the next active, records only that
replica as in sync, resigns and steps down
(mrs.replication.active.Active.hand_over); the replica wins the next term and
recovers as a restarted group does. Nothing acknowledged is lost and nothing is
marked POSSDUPL that was not handed out. This command waits for the new active and
prints `GROUP: OLD -> NEW (term T) in S s`, or the active's refusal; a request still
standing when it gives up is withdrawn (mrs.replication.coordinator.FailoverRequest).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from mrs.address import id_number
from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.limits import (
    REPLICATION_HANDOVER_FALLBACK_S,
    REPLICATION_HANDOVER_WAIT_S,
    REPLICATION_POLL_S,
)
from mrs.offline.journal_files import operator_path
from mrs.tools.cli_support import seconds_in

FAILOVER_WAIT_S_DEFAULT = 30.0
FAILOVER_WAIT_S_MAX = 3600.0
"""The longest `--wait`, an hour: the active reads the request when it renews its
lease (every TTL / 4: 900 s at the longest lease_ttl_s, 3600), and hands over within
REPLICATION_HANDOVER_WAIT_S. Why bounded: `--wait 1e308` was taken, and a request
the active never took stood for good, never withdrawn (`seconds_in`: exit 2)."""


def add_failover_parser(commands: argparse._SubParsersAction, run) -> None:
    failover = commands.add_parser(
        "failover", help="hand a replicated group's active role to another instance"
    )
    failover.add_argument(
        "--config", required=True, type=operator_path, help="bus configuration (TOML)"
    )
    failover.add_argument("group", help="the group: its name or id")
    failover.add_argument(
        "--to", help="the instance to hand over to (in sync; default: the active picks one)"
    )
    failover.add_argument(
        "--wait",
        type=seconds_in(REPLICATION_HANDOVER_WAIT_S, FAILOVER_WAIT_S_MAX),
        default=FAILOVER_WAIT_S_DEFAULT,
        help=f"seconds to wait at most ({REPLICATION_HANDOVER_WAIT_S:g}, the hand-over's "
        f"own, to {FAILOVER_WAIT_S_MAX:g})",
    )
    failover.set_defaults(run=run)


def run_failover(args: argparse.Namespace) -> int:
    import trio

    from mrs.config.bus import load_config

    bus = load_config(args.config)
    try:
        group = (
            bus.group(int(args.group))
            if id_number(args.group)
            else bus.group_by_name(args.group)  # "²" is isdigit(), and int() refused it
        )
    except LookupError as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    if not group.instances or bus.coordinator is None:
        raise CommandError(f"group {group.id} ({group.name}) is not replicated", EXIT_USAGE)
    if args.to is not None and args.to not in {i.name for i in group.instances}:
        names = ", ".join(i.name for i in group.instances)
        raise CommandError(f"group {group.name} has no instance {args.to!r} ({names})", EXIT_USAGE)
    # never less than the active's own hand-over may take (the parser's least): the
    # messages say how long was waited (they said `--wait 0.1`'s 0.1 s after 5 s)
    line = trio.run(_switch, bus, group, args.to or "", args.wait)
    print(line)
    return 0


async def _switch(bus, group, to: str, wait_s: float) -> str:
    """`_hand_over` through the bus's etcd, an etcd that does not answer said in one
    line (`_etcd_silent`)."""
    from mrs.replication.coordinator import CoordinatorUnavailable, EtcdCoordinator, etcd_prefix
    from mrs.replication.etcd import EtcdClient

    coordinator = EtcdCoordinator(
        EtcdClient(bus.coordinator.etcd),
        etcd_prefix(bus.coordinator.prefix, group.id),
        "mrs-failover",
        bus.coordinator.lease_ttl_s,
    )
    asked: list[object] = []
    try:
        return await _hand_over(coordinator, bus, group, to, wait_s, asked)
    except CoordinatorUnavailable as error:
        raise _etcd_silent(str(error), bus, bool(asked)) from None
    finally:
        await coordinator.aclose()


async def _hand_over(coordinator, bus, group, to: str, wait_s: float, asked: list) -> str:
    """Ask for the hand-over (noted in `asked`), then wait for another instance to hold
    a newer term, or for the active's refusal; a request still standing when the wait
    ends is withdrawn, so the active never carries it out after this command said it
    failed."""
    import trio

    from mrs.replication.coordinator import FailoverRequest

    before = await coordinator.read()
    if before.leader is None:
        raise CommandError(f"{group.name}: no active instance now (a failover is under way?)", 1)
    if to and to not in (before.in_sync or ()):
        raise _not_in_sync(group.name, to, before.in_sync or ())
    if to == before.leader:
        return f"{group.name}: {to} is already active (term {before.term})"
    started_s = time.monotonic()
    request = FailoverRequest(to, uuid.uuid4().hex)
    await _request(coordinator, request, group.name, bus.path)
    asked.append(request)
    with trio.move_on_after(wait_s):
        while True:
            await trio.sleep(REPLICATION_POLL_S)
            now = await coordinator.read()
            if now.leader is not None and now.term > before.term:
                return _switched(group.name, before, now, to, time.monotonic() - started_s)
            if (why := await coordinator.failover_refusal(request)) is not None:
                raise CommandError(
                    f"{group.name}: {before.leader} refused the failover: {why}; it stays active",
                    1,
                )
    if await coordinator.withdraw_failover(request):
        raise CommandError(
            f"{group.name}: {before.leader} did not act on the request within "
            f"{wait_s:g} s; it is withdrawn",
            1,
        )
    if (why := await coordinator.failover_refusal(request)) is not None:
        raise CommandError(f"{group.name}: {before.leader} refused the failover: {why}", 1)
    raise CommandError(
        f"{group.name}: {before.leader} handed over, and no instance took over within "
        f"{wait_s:g} s (mrs status --config {bus.path} says where it stands)",
        1,
    )


def _switched(group_name: str, before, now, to: str, took_s: float) -> str:
    """The line for a newer term with a leader: this request's switch, or exit 1 when
    the active is not the one asked for, or is the old one again.

    Why the old one: a hand-over nobody takes (the chosen replicas lost after their
    acknowledgement, or no candidate: their client port taken, their credentials
    unusable) is taken back by the old active after REPLICATION_HANDOVER_FALLBACK_S,
    in a newer term. Without `--to` that read as a switch (`NYC: a -> a (term 2) in
    10.9 s`, exit 0): an operator could go on to stop the instance still active."""
    switched = f"{before.leader} -> {now.leader} (term {now.term})"
    if now.leader == before.leader:
        nobody = f"{to} did not take over" if to else "no replica took over"
        raise CommandError(
            f"{group_name}: {before.leader} is active again (term {now.term}): {nobody} "
            f"within {REPLICATION_HANDOVER_FALLBACK_S:g} s of the hand-over (lost, or "
            "not a candidate: its log says why)",
            1,
        )
    if to and now.leader != to:  # not this request's switch
        raise CommandError(
            f"{group_name}: {switched}, not to {to}: the active changed another way "
            "(lost, or another failover)",
            1,
        )
    return f"{group_name}: {switched} in {took_s:.1f} s"


def _etcd_silent(text: str, bus, asked: bool) -> CommandError:
    """The one line for an etcd that could not be asked. Why: it was the client's own
    words, `etcd: etcd unreachable: http://...: ConnectError('all attempts to connect
    to 127.0.0.1:2379 failed')`, naming neither the config entry to check nor whether
    a failover was asked for."""
    from mrs.replication.etcd import silent_etcd_line

    state = (
        f"a failover was asked for and may still happen (mrs status --config {bus.path})"
        if asked
        else "no failover was asked for"
    )
    line = silent_etcd_line(text, bus.coordinator.etcd, bus.path, state)
    if line is None:  # it answered, with an error
        return CommandError(f"etcd at {', '.join(bus.coordinator.etcd)}: {text}", 1)
    return CommandError(line, 1)


def _not_in_sync(group_name: str, to: str, in_sync: Iterable[str]) -> CommandError:
    """The one line for a --to that is not in sync (the set named, not a Python tuple)."""
    named = ", ".join(sorted(in_sync)) or "none"
    return CommandError(
        f"{group_name}: {to} is not in sync (in sync: {named}): it may lack answered "
        "records; wait until `mrs status` says it is in sync",
        1,
    )


async def _request(coordinator, request, group_name: str, bus_path: Path) -> None:
    """Ask for the hand-over, unless another command's request stands (one line)."""
    if await coordinator.request_failover(request):
        return
    standing = await coordinator.failover_requested()
    towards = f" to {standing.to}" if standing is not None and standing.to else ""
    raise CommandError(
        f"{group_name}: another failover{towards} is under way; ask again once it "
        f"is over (mrs status --config {bus_path})",
        1,
    )
