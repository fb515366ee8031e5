"""The trio driver of link sessions: wake-ups, dialing with backoff, handshake, receive loop.

One TCP connection per linked pair; the lower-numbered group dials (to the peer's
listen address, or the link's `address` override, e.g. a fault proxy). The session
(mrs.group.link_session) decides what to send; this module only moves bytes, keeps
time, and reconnects with capped exponential backoff.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from mrs import protocol as wire
from mrs.config.addresses import host_port
from mrs.config.guards import Guards
from mrs.core.refusals import RefusalLog, clipped
from mrs.errors import MrsError
from mrs.group.incarnation import PeerIncarnations, short
from mrs.group.link_session import PeerLink
from mrs.group.wiring import LinkRooms
from mrs.limits import LINK_BACKOFF_S_MAX as BACKOFF_S_MAX
from mrs.limits import LINK_BACKOFF_S_MIN as BACKOFF_S_MIN
from mrs.limits import LINK_HANDSHAKE_TIMEOUT_S as HANDSHAKE_TIMEOUT_S
from mrs.limits import OUTBOX_BYTES_HIGH, REFUSAL_LOG_INTERVAL_S
from mrs.model import Status
from mrs.transport.framed import GroupChannel, StreamClosed
from mrs.transport.network import TCP, Network
from mrs.transport.watchdog import Liveness, next_nonce, watch

log = logging.getLogger("mrs.links")

LINK_PROGRAM_PREFIX = "group:"
PEER_STARTING = "is starting: its active waits for a replica to hold its first records"
"""How a replicated group's new active refuses a link until its first records are on
a majority (mrs.server.links): a moment, so the dialer tries again at once."""
HELLO_FIELDS_WITH_INCARNATION = 6
"""A link Hello's fields up to `incarnation`: what a group of the release before the
link term reads (it refuses a replicated group's, which says a `term` too)."""
HELLO_FIELDS_WITH_TERM = 7
"""A link Hello's fields up to `term`: what a group of the release before the
Welcome's term reads (it refuses this release's Hello to a replicated group, which
says `welcome_term`)."""
EARLIER_RELEASE_REFUSAL = re.compile(r"\bHello frame has (\d+) fields, expected (\d+)\b")
"""How a group of an earlier release refuses a link Hello longer than it knows (one
with this release's `incarnation`): the dialer then links without it, unless that
peer's links brought an incarnation before (`_refusal`)."""


def new_link(rooms: LinkRooms, peer_id: int) -> PeerLink:
    """A link session on trio's clock (what the timers and the RETRY backoff use),
    woken through a trio event from the start, so no wake-up is lost before `pump`."""
    return PeerLink(rooms, peer_id, now_s=trio.current_time, wake=_Wakeup())


@dataclass(eq=False)
class _Wakeup:
    """The session's wake(): sets the event `pump` waits on."""

    event: trio.Event = field(default_factory=trio.Event)

    def __call__(self) -> None:
        self.event.set()


async def pump(link: PeerLink) -> None:
    """Drive one session (made by `new_link`) for ever: flush whenever it asks."""
    wakeup = link.wake
    assert isinstance(wakeup, _Wakeup), "pump() drives sessions made by new_link()"
    while True:
        await wakeup.event.wait()
        wakeup.event = trio.Event()
        if link.channel is not None:
            link.flush()


# ---------------------------------------------------------------------- dialing side
class DialedChannel(GroupChannel):
    """The dialer's end of a link connection: a framed stream (mrs.transport.framed), the same
    outbox and send loop as a server session's, and the same drop of what a broken
    connection can no longer carry (mrs.transport.framed.GroupChannel)."""


async def dial_forever(
    link: PeerLink,
    host: str,
    port: int,
    group_id: int,
    frame_bytes_max: int,
    network: Network = TCP,
    guards: Guards | None = None,
    secure: Callable[[trio.abc.Stream, int], Awaitable[None]] | None = None,
    incarnations: PeerIncarnations | None = None,
    peer_replicated: bool = False,
) -> None:
    """Keep the link to a higher-numbered peer up: connect, handshake, serve; on any
    failure wait (capped exponential backoff) and try again. secure: authenticate the
    new stream to the peer (mrs.security) before the link Hello. incarnations: this
    group's journals' incarnation, said in the Hello, and the peer's, checked in its
    Welcome (mrs.group.incarnation); a peer whose journals changed is logged as an
    ERROR once per change, not at every redial. peer_replicated: the Hello asks for
    the peer's term (`welcome_term`), and a Welcome from an old active is refused; an
    unreplicated peer has none to say, and is sent the Hello of the release before."""
    redials = _Redials(link.peer_id, host_port(host, port))
    while True:
        connected = answered = False
        said = None if redials.earlier else incarnations
        term = 0 if redials.earlier or redials.termless else incarnations_term(incarnations)
        welcome_term = peer_replicated and said is not None and not redials.without_terms
        up_s = 0.0
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                stream = await network.connect(host, port)
            connected = True
            async with stream:
                if secure is not None:
                    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                        await secure(stream, link.peer_id)
                channel = DialedChannel(stream, wire.Connection("client", frame_bytes_max))
                await _handshake(
                    channel, link.peer_id, group_id, incarnations, said, term, welcome_term
                )
                answered, up_s = True, trio.current_time()
                redials.retries.flush_now(", before the link came up")  # not after its line
                redials.earlier = False  # a peer upgraded since is told the incarnation
                redials.termless = redials.termless_welcome = False  # and the terms
                redials.down_since_s = None
                link.up(channel)
                try:
                    async with trio.open_nursery() as tasks:
                        await serve_link(
                            link,
                            channel,
                            guards or Guards(),
                            Liveness(handshake_done=True),
                            tasks,
                            f"link to group {link.peer_id}",
                        )
                finally:
                    channel.closed = True
                    link.down("connection closed", channel)
                    redials.down_since_s = trio.current_time()
                    if trio.current_time() - up_s >= BACKOFF_S_MAX:
                        # It served a while: redial at once. One that breaks at once
                        # (a peer that lies, or closes after the Welcome) keeps backing
                        # off, or it was redialed, resent to and logged 20 times a second.
                        redials.backoff_s = BACKOFF_S_MIN
        except Exception as error:  # noqa: BLE001 - the link retries whatever went wrong
            redials.failed(error, network if connected and not answered else None)
        await trio.sleep(redials.backoff_s)
        redials.backoff_s = min(redials.backoff_s * 2, BACKOFF_S_MAX)


@dataclass
class _Redials:
    """What `dial_forever`'s failed dials to one peer tell its next dial."""

    peer_id: int
    address: str
    backoff_s: float = BACKOFF_S_MIN
    journals_refused: str = ""
    starting: bool = False
    """The last dial was refused by a new active still starting."""
    earlier: bool = False
    """The last dial was refused by a peer of an earlier release: the next says no
    incarnation (`PeerOfEarlierRelease`)."""
    termless: bool = False
    """The last dial was refused by a peer of the release before the link term: the
    next says no term (`PeerWithoutTerms`)."""
    termless_welcome: bool = False
    """The last dial was refused by a peer of the release before the Welcome's term:
    the next does not ask for it (`PeerWithoutWelcomeTerms`)."""
    down_since_s: float | None = None
    """When the link, up before, went down (trio time; None while up or never up):
    for REFUSAL_LOG_INTERVAL_S from then its failed redials are not logged at INFO,
    the link's own WARNING said why it went down (mrs.group.link_session `down`)."""
    retries: RefusalLog = field(
        default_factory=lambda: RefusalLog(log, level=logging.INFO, line_format="{message}")
    )
    warnings: RefusalLog = field(
        default_factory=lambda: RefusalLog(log, level=logging.WARNING, line_format="{message}")
    )

    @property
    def without_terms(self) -> bool:
        """The last dial was refused by a peer of a release before either term."""
        return self.termless or self.termless_welcome

    def failed(self, error: Exception, unanswered: Network | None) -> None:
        """Take a failed dial's `error`; `unanswered`: the network, when the peer took
        the connection and gave no Welcome."""
        if isinstance(error, PeerStarting) and not self.starting:
            self.backoff_s = BACKOFF_S_MIN  # its replica holds them within milliseconds
        self.starting = isinstance(error, PeerStarting)
        self.earlier = isinstance(error, PeerOfEarlierRelease)
        self.termless = isinstance(error, PeerWithoutTerms)
        self.termless_welcome = isinstance(error, PeerWithoutWelcomeTerms)
        if self.earlier or self.termless or self.termless_welcome:
            _log_earlier_release(self.warnings, self.peer_id, self.address, error)
        elif unanswered is not None and hasattr(unanswered, "pass_over") and not self.starting:
            unanswered.pass_over()  # a replicated peer: its next instance first next time
        if isinstance(error, OldActiveWelcomed):  # passed over above: its successor next
            self.warnings.refused(
                "link_old_term",
                self.address,
                f"link to group {self.peer_id} at {self.address} refused: {error.message}",
            )
        if isinstance(error, JournalsChanged) and error.message != self.journals_refused:
            self.journals_refused = error.message
            log.error("link to group %d refused: %s", self.peer_id, error.message)
        since_s = self.down_since_s
        if since_s is not None and trio.current_time() - since_s < REFUSAL_LOG_INTERVAL_S:
            # One line per state change: a short outage is its down and its up line.
            log.debug("link to group %d at %s: %s", self.peer_id, self.address, _describe(error))
            return
        _log_retry(self.retries, self.peer_id, self.address, error, self.backoff_s)


def _log_retry(
    retries: RefusalLog, peer_id: int, address: str, error: BaseException, backoff_s: float
) -> None:
    """One line for a failed dial: at once when its reason is new or the backoff has
    just reached its cap, then at most every REFUSAL_LOG_INTERVAL_S per reason with
    the count of dials not shown. Why: a peer group down for a day was redialed every
    LINK_BACKOFF_S_MAX, and each dial wrote a line (43,200 a day per link)."""
    why = _describe(error)
    retries.refused(
        "link_dial",
        address,
        f"link to group {peer_id} at {address}: {why}; retrying in {backoff_s:.2f} s",
        key=(why, backoff_s >= BACKOFF_S_MAX),
    )


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    return str(error) or type(error).__name__


class LinkRefused(MrsError):
    """The peer closed, refused or was not the group we dialed: the link stays down."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.LINK_DOWN, message)


class PeerStarting(LinkRefused):
    """The peer's new active is starting (`PEER_STARTING`). Why apart: the failover
    that made it active had grown the backoff to its cap, and the dialer waited 2 s
    more for an active that was ready a few milliseconds after it refused."""


class PeerOfEarlierRelease(LinkRefused):
    """The peer refused this release's link Hello as longer than it knows
    (EARLIER_RELEASE_REFUSAL): a group of an earlier release, during a rolling
    upgrade. The next dial says no incarnation, as that release's groups
    did: such a peer checks none anyway, and its Welcome carries none to check. Only
    from a peer this group never met with an incarnation (`_refusal`). Why:
    the lower-numbered group upgraded first was refused by its old peer until that
    one was upgraded too, and what it sent there waited in its SAF all that while."""


class PeerWithoutTerms(LinkRefused):
    """The peer refused a replicated group's link Hello for its `term`, the one field
    it does not know (EARLIER_RELEASE_REFUSAL, expecting HELLO_FIELDS_WITH_INCARNATION):
    a group of the release before the link term. The next dial says the incarnation,
    which it checks, and no term: such a peer does not fence old actives."""


class PeerWithoutWelcomeTerms(LinkRefused):
    """The peer refused this release's link Hello for its `welcome_term`, the one field
    it does not know (EARLIER_RELEASE_REFUSAL, expecting HELLO_FIELDS_WITH_TERM): a
    group of the release before the Welcome's term. The next dial says the incarnation
    and the term, which it checks, and does not ask for its term: an old active of
    such a peer that accepts the link is not refused."""


class OldActiveWelcomed(LinkRefused):
    """The peer's instance that welcomed the link is the active of a term older than
    one this group linked with (mrs.group.incarnation `admit_term`): an old active
    that outlived its lease. The connection is dropped before anything on it is
    taken; the next dial tries the peer's next instance."""


class JournalsChanged(LinkRefused):
    """The peer's journals are not the ones this group linked with before
    (mrs.group.incarnation): refused until an operator resets the link."""


async def _handshake(
    channel: DialedChannel,
    peer_id: int,
    group_id: int,
    incarnations: PeerIncarnations | None,
    said: PeerIncarnations | None,
    term: int = 0,
    welcome_term: bool = False,
) -> None:
    """Hello (saying `said`'s incarnation: None for a peer of an earlier release,
    `dial_forever`; `term`, a replicated group's, 0 for none; and `welcome_term`, that
    this dialer reads the peer's term), then the peer's Welcome, its incarnation and
    term checked by `incarnations`."""
    own = said.own if said is not None else b""
    program = f"{LINK_PROGRAM_PREFIX}{group_id}"
    hello = wire.Hello(
        wire.PROTOCOL_VERSION, program, "link", group_id, False, own, term, welcome_term
    )
    await channel.send_now(hello)
    try:
        event = await channel.next_event(HANDSHAKE_TIMEOUT_S)
    except StreamClosed:
        raise LinkRefused("peer closed during the handshake") from None
    if isinstance(event, wire.Fatal):
        raise _refusal(event.message, own, peer_id, incarnations)
    if not isinstance(event, wire.Welcome) or event.group_id != peer_id:
        found = getattr(event, "group_id", event)
        raise LinkRefused(f"expected group {peer_id} at this address, found {found}")
    if incarnations is not None:
        # A Welcome without an incarnation from a peer whose links brought one is
        # refused there too: whatever answered is not that peer (`admit`).
        problem = incarnations.admit(peer_id, event.incarnation)
        if problem is not None:
            raise JournalsChanged(problem)
        await _admit_welcome_term(channel, peer_id, incarnations, event.term)


async def _admit_welcome_term(
    channel: DialedChannel, peer_id: int, incarnations: PeerIncarnations, term: int
) -> None:
    """Refuse a Welcome from an old active of `peer_id` (OldActiveWelcomed), telling
    it why: its term is older than one its group linked with. Why: a replicated
    peer's active that outlived its lease still accepts links; taken, its link
    drained its SAF again after its successor had drained it here and had this group
    forget the dedupe keys (confirmed messages came again, unmarked), and took its
    notices. Nothing on this connection is handed to the link: what came behind the
    Welcome is dropped with it."""
    problem = incarnations.admit_term(peer_id, term, "that welcomed this link")
    if problem is None:
        return
    with contextlib.suppress(Exception):  # it may have gone: refused either way
        with trio.move_on_after(1):
            await channel.send_now(wire.Fatal(int(Status.LINK_DOWN), f"link refused: {problem}"))
    raise OldActiveWelcomed(problem)


def _refusal(
    message: str,
    own: bytes,
    peer_id: int = 0,
    incarnations: PeerIncarnations | None = None,
) -> LinkRefused:
    """The error for a peer's refusal of this dialer's Hello (that said `own`). A
    refusal worded as an earlier release's is taken as one only from a peer no link
    has brought an incarnation from (`incarnations`): one that did runs this release
    at least, and no group goes back to an earlier one (docs/operations.md, "Upgrading
    a bus"). Why: the refusal's text is all a peer has to say, and a peer (or whatever
    answers at its address) that said it made the dialer drop the incarnation from
    its Hello, so neither side checked the other's journals."""
    clipped_message = clipped(message)
    if PEER_STARTING in message:
        return PeerStarting(f"peer refused the link: {clipped_message}")
    earlier = EARLIER_RELEASE_REFUSAL.search(message)
    if not (own and earlier is not None and int(earlier[1]) > int(earlier[2])):
        return LinkRefused(f"peer refused the link: {clipped_message}")
    if int(earlier[2]) >= HELLO_FIELDS_WITH_TERM:  # it checks incarnations and terms
        return PeerWithoutWelcomeTerms(f"peer refused the link: {clipped_message}")
    if int(earlier[2]) >= HELLO_FIELDS_WITH_INCARNATION:  # it checks incarnations
        return PeerWithoutTerms(f"peer refused the link: {clipped_message}")
    if incarnations is None or (recorded := incarnations.recorded(peer_id)) is None:
        return PeerOfEarlierRelease(f"peer refused the link: {clipped_message}")
    incarnations.note_refused(peer_id)
    return JournalsChanged(
        f"group {peer_id} refused this release's link Hello as a group of an earlier release"
        f" would ({clipped_message}), but its links brought this release's incarnation"
        f" of its journals before ({short(recorded)}): not linked without it. Stop whatever"
        f" answers at its address; if group {peer_id} was really taken back to an earlier"
        f" release, run `mrs admin reset-link {peer_id} --config {incarnations.config_path}"
        f" --group {incarnations.group_id}`; nothing waiting is lost meanwhile"
    )


def incarnations_term(incarnations: PeerIncarnations | None) -> int:
    """The term a link Hello says: the replicated group's active's, else 0."""
    return 0 if incarnations is None else incarnations.term


def _log_earlier_release(
    warnings: RefusalLog, peer_id: int, address: str, error: Exception
) -> None:
    """One WARNING (at most every REFUSAL_LOG_INTERVAL_S) that `peer_id` runs an
    earlier release: the link goes on without the check that release lacks (`error`
    says which) until it is upgraded."""
    if isinstance(error, PeerWithoutWelcomeTerms):
        what = f"its term, so this group does not refuse an old active of group {peer_id}"
    elif isinstance(error, PeerWithoutTerms):
        what = "this group's term, so it does not refuse an old active of this group"
    else:
        what = "the journals' incarnation, which it does not check"
    warnings.refused(
        "link_earlier_release",
        address,
        f"link to group {peer_id} at {address}: group {peer_id} runs an earlier release"
        f" (it refused this release's link Hello): linking without {what}; upgrade"
        f" group {peer_id}",
    )


async def serve_link(
    link: PeerLink,
    channel: GroupChannel,
    guards: Guards,
    liveness: Liveness,
    tasks: trio.Nursery,
    name: str,
) -> None:
    """Serve one link connection until it ends, on either end: the dialer's
    (`dial_forever`) and the acceptor's (mrs.server.connections, once the peer's link
    Hello was adopted). One receive loop and one watchdog for both, started in `tasks`
    (whose scope this cancels as it returns), so a link behaves the same whichever
    group dialed. `name` says which end in log lines ("link to group 2")."""
    tasks.start_soon(_send_loop, link, channel, name)
    tasks.start_soon(_watch_link, link, channel, liveness, guards, name, tasks.cancel_scope)
    tasks.start_soon(_watch_answers, link, channel, guards, name, tasks.cancel_scope)
    try:
        why = await _receive_link_events(link, channel, liveness)
    except wire.ProtocolError as error:
        link.ending(channel, protocol_down_line(name, error))
        with contextlib.suppress(wire.ProtocolError):
            channel.send(wire.Fatal(int(error.status), str(error)))
        with trio.move_on_after(1):
            await channel.flushed()
    except Exception as error:
        link.ending(channel, f"{name} down: {_describe(error)}")
        raise
    else:
        link.ending(channel, f"{name} down: {why}")
    tasks.cancel_scope.cancel()


def protocol_down_line(name: str, error: wire.ProtocolError) -> str:
    """Why a link ended on a ProtocolError. A frame cut short by the connection's end
    is a cut (a network cut, a peer killed mid-send), said as one: it read "protocol
    error: connection closed mid-frame", which sent the operator after a peer's bug."""
    if str(error).startswith(wire.MID_FRAME):
        return f"{name} down: connection cut mid-frame (a network cut, or the peer stopped)"
    return f"{name} down: protocol error: {error}"


async def _send_loop(link: PeerLink, channel: GroupChannel, name: str) -> None:
    """The channel's send loop; an error that ends it is why the link went down."""
    try:
        await channel.send_loop()
    except Exception as error:
        link.ending(channel, f"{name} down: {_describe(error)}")
        raise


async def _receive_link_events(link: PeerLink, channel: GroupChannel, liveness: Liveness) -> str:
    """Hand each event to the session until the peer closes or says Fatal; what came
    buffered with the handshake first. Answers that wait for no commit (a notice's
    LinkAck, a Pong) leave at once; a peer that stops reading slows this reader: once
    more than OUTBOX_BYTES_HIGH of answers wait for it. Not counting this side's own
    unanswered frames (their window bounds them): with big messages drained both ways,
    each side waited for its outbox of transfers to drain before reading the other's,
    and neither read again (the link was given up for silence, redialed, and stuck
    the same way: nothing crossed). Returns why the connection ended."""
    events, still_open = channel.connection.events(), True
    while True:
        for event in events:
            if isinstance(event, wire.Fatal):
                return f"the peer ended it: {clipped(event.message)}"
            if event is wire.CLOSED:
                return "the peer closed the connection"
            link.handle(event, channel)
        channel.write_now()
        if not still_open:
            return "the peer closed the connection"
        liveness.heard(channel.buffered_bytes, len(events))
        await channel.wait_drained(OUTBOX_BYTES_HIGH + link.in_flight_bytes)
        events, still_open = await channel.receive_events()


async def _watch_answers(
    link: PeerLink,
    channel: GroupChannel,
    guards: Guards,
    name: str,
    scope: trio.CancelScope,
) -> None:
    """Give the link up when the peer has left something unanswered for
    link_silence_s_max: a peer that answers pings (so the heartbeat finds it alive)
    but never a transfer kept the link "up" while nothing was delivered, every put
    sent to it waited out its timeout and the drain stood still. Dropped, the link
    answers what was in flight LINK_LOST (recoverable messages wait in the SAF) and
    the dialer redials."""
    limit_s = guards.link_silence_s_max
    while (waited_s := link.unanswered_s()) < limit_s:
        await trio.sleep(limit_s - waited_s if waited_s > 0 else guards.heartbeat_interval_s)
    why = f"an answer awaited for {waited_s:.1f} s (silence limit {limit_s:g} s)"
    await _declare_down(link, channel, name, why, scope)


async def _watch_link(
    link: PeerLink,
    channel: GroupChannel,
    liveness: Liveness,
    guards: Guards,
    name: str,
    scope: trio.CancelScope,
) -> None:
    """Ping a quiet peer; after link_silence_s_max of silence, give the link up (the
    dialer reconnects; meanwhile LINK_DOWN and the UMAs apply)."""

    def ping() -> None:
        with contextlib.suppress(wire.ProtocolError):
            channel.send(wire.Ping(next_nonce()))

    why = await watch(liveness, guards, guards.link_silence_s_max, ping)
    await _declare_down(link, channel, name, why, scope)


async def _declare_down(
    link: PeerLink, channel: GroupChannel, name: str, why: str, scope: trio.CancelScope
) -> None:
    """Close a link connection the peer no longer serves: say why (the line the
    link's `down` logs), then end it."""
    link.ending(channel, f"{name} declared down: {why}")
    with contextlib.suppress(wire.ProtocolError):
        channel.send(wire.Fatal(int(Status.TIMEOUT), f"closing: {why}"))
    with trio.move_on_after(1):
        await channel.flushed()
    scope.cancel()
