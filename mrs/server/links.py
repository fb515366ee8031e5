"""Starts the server's peer links: one PeerLink per linked group, dialed or adopted.

The lower-numbered group of a link dials; the higher one adopts the dialer's
connection after checking who it is (configured link, TLS identity, credentials).
"""

from __future__ import annotations

import functools
import logging
from typing import NoReturn

import trio

from journals import JournalError
from mrs import protocol as wire
from mrs.config.bus import BusConfig, GroupConfig
from mrs.config.guards import Guards
from mrs.core.refusals import RefusalLog, clipped
from mrs.group import Group
from mrs.group.incarnation import PeerIncarnations, own_incarnation, short
from mrs.group.link_driver import PEER_STARTING, dial_forever, new_link, pump
from mrs.group.link_session import PeerLink
from mrs.model import Status
from mrs.replication.stream import RecordingStore
from mrs.security import session_auth
from mrs.security.authority import Authority
from mrs.security.tls import check_link_peer
from mrs.server.instance_dial import InstancesNetwork
from mrs.server.session import ServerSession
from mrs.transport.network import Network

log = logging.getLogger("mrs.server")


class PeerLinks:
    """A server's links to the groups its own is linked with: one PeerLink per peer,
    started once the group exists, dialed or adopted."""

    def __init__(
        self,
        bus: BusConfig,
        config: GroupConfig,
        network: Network,
        guards: Guards,
        authority: Authority | None,
        frame_bytes_max: int,
    ) -> None:
        self.bus = bus
        self.config = config
        self.network = network
        self.guards = guards
        self.authority = authority
        self.frame_bytes_max = frame_bytes_max
        self.links: dict[int, PeerLink] = {}
        """Peer group id -> its link, once started."""
        self.incarnations: PeerIncarnations | None = None
        """This group's journals' incarnation and those its links met (set by `start`)."""
        self.refusals = RefusalLog(log, line_format="{message}")
        """A refused link Hello, logged once per (reason, host) per interval with a
        count: a misconfigured peer dials again every few seconds, forever."""

    def start(self, group: Group, nursery: trio.Nursery) -> None:
        """One PeerLink per linked group; this group dials the higher-numbered ones.
        Each link says this group's journals' incarnation and checks the peer's
        (mrs.group.incarnation), whichever side dialed; none is dialed or adopted
        before the incarnation is as durable as an answer (`_start_when_answerable`)."""
        store = group.ctx.store
        incarnations = PeerIncarnations(
            store, self.config.id, own_incarnation(store), str(self.bus.path)
        )
        if isinstance(store, RecordingStore):  # said in each link Hello: a fencing token
            incarnations.term = store.stream.term
        for peer_id in group.peers:
            link = new_link(group.link_rooms, peer_id)
            self.links[peer_id] = link
            nursery.start_soon(pump, link)
        if isinstance(store, RecordingStore):
            nursery.start_soon(self._start_when_answerable, store, incarnations, nursery)
        else:  # an unreplicated group's: synced on its one disk
            self._start_links(incarnations, nursery)

    def durable_incarnation(self) -> bytes:
        """This group's journals' incarnation once it is on a majority of its instances
        (`_start_when_answerable`), b"" before: a client's SAF journal records the one
        its group tells it, and one a failover lost would refuse the next active."""
        return b"" if self.incarnations is None else self.incarnations.own

    async def _start_when_answerable(
        self, store: RecordingStore, incarnations: PeerIncarnations, nursery: trio.Nursery
    ) -> None:
        """The links of a replicated group's active, once every record it holds now
        (its incarnation among them) is on a majority of its instances. Why: the
        active writes the incarnation when the journals have none yet (a new group,
        journals of an older release), and a peer keeps the first one it meets for
        good; told one that a failover then lost, the peer refused the next active's
        link as "other journals", and the `mrs admin reset-link` it asked for deleted
        the dedupe keys of the same journals' messages (resends stored twice)."""
        await store.stream.wait_answered(store.stream.number)
        self._start_links(incarnations, nursery)

    def _start_links(self, incarnations: PeerIncarnations, nursery: trio.Nursery) -> None:
        """Adopt the lower-numbered peers' dials from now on; dial the higher ones."""
        self.incarnations = incarnations
        for peer_id, link in self.links.items():
            if self.config.id >= peer_id:
                continue
            host, port = self._dial_address(peer_id)
            if port == 0:
                log.error(
                    "cannot dial group %d: its listen port is 0 and the link has no address",
                    peer_id,
                )
                continue
            nursery.start_soon(
                functools.partial(
                    dial_forever,
                    secure=self.authority.dial_link if self.authority is not None else None,
                    incarnations=incarnations,
                    peer_replicated=bool(self.bus.group(peer_id).instances),
                ),
                link,
                host,
                port,
                self.config.id,
                self.frame_bytes_max,
                self._dial_network(peer_id),
                self.guards,
            )

    def _dial_network(self, peer_id: int) -> Network:
        """A replicated peer: dial whichever of its instances is active."""
        instances = self.bus.group(peer_id).instances
        link_config = self.bus.link_between(self.config.id, peer_id)
        if not instances or (link_config is not None and link_config.address_host is not None):
            return self.network
        return InstancesNetwork(self.network, instances)  # type: ignore[return-value]

    def _dial_address(self, peer_id: int) -> tuple[str, int]:
        link_config = self.bus.link_between(self.config.id, peer_id)
        if link_config is not None and link_config.address_host is not None:
            assert link_config.address_port is not None  # parsed with the host
            return link_config.address_host, link_config.address_port
        peer = self.bus.group(peer_id)
        return peer.listen_host, peer.listen_port

    def reset(self, peer_id: int, force: bool = False) -> dict:
        """Forget the journals recorded for `peer_id` and their dedupe keys, so its next
        link records the ones it brings (mrs.group.incarnation); LookupError (one line)
        for a group this one has no link with, or whose link is up: its journals are
        then the recorded ones, and their keys still keep its resends out. Unless
        `force`, also while its link was not refused for its journals since this
        process started (`PeerIncarnations.may_reset`): a peer merely stopped keeps
        its journals, and its SAF resends what this group stored before its answer
        arrived; with the keys deleted each was stored and delivered again, unmarked."""
        link = self.links.get(peer_id)
        if link is None:
            raise LookupError(f"group {self.config.id} has no link with group {peer_id}")
        if self.incarnations is None:
            raise LookupError(f"group {self.config.id} is starting its links: try again")
        if link.channel is not None:
            raise LookupError(
                f"the link with group {peer_id} is up, with the journals recorded for it: "
                "nothing to reset"
            )
        if not force and not self.incarnations.may_reset(peer_id):
            raise LookupError(
                f"group {self.config.id} has not refused group {peer_id}'s link for its "
                "journals since it started: a group merely stopped resends from its SAF, "
                "stored twice without its dedupe keys. Reset once refused, or --force"
            )
        recorded, deleted = self.incarnations.reset(peer_id)
        forgotten = None if recorded is None else short(recorded)
        log.warning(
            "link with group %d reset: its journals (%s) forgotten, %d dedupe keys deleted",
            peer_id,
            forgotten or "none recorded",
            deleted,
        )
        return {"peer": peer_id, "forgotten": forgotten, "dedupe_keys_deleted": deleted}

    def adopt(self, session: ServerSession, hello: wire.Hello) -> None:
        """A lower-numbered peer dialed us: check who it is, then hand it the session."""
        peer_id = hello.group
        link = self.links.get(peer_id)
        if link is None or peer_id >= self.config.id:
            self._refuse(
                "not linked",
                peer_id,
                session,
                f"refused link from {session.peer} claiming group {peer_id} "
                f"({clipped(hello.program)!r}): not a lower-numbered group linked to "
                f"group {self.config.id}",
                f"group {self.config.id} has no link from group {peer_id} "
                f"({clipped(hello.program)!r})",
            )
        if (problem := check_link_peer(session.stream, peer_id)) is not None:
            # NOTAUTHORIZED, as a Hello from a principal that is not that group: a
            # certificate that does not name the group claimed is no proof of it.
            # Why: answered PROTOCOL_ERROR, a client holding the bus's client
            # certificate was told it broke the protocol, and with [auth] on too a
            # wrong principal's link Hello no longer got the NOTAUTHORIZED the docs say.
            line = f"refused link from {session.peer}: {problem}"
            self._refuse(problem, peer_id, session, line, problem, Status.NOTAUTHORIZED)
        if (problem := session_auth.link_problem(self.authority, session, peer_id)) is not None:
            line = (
                f"refused link Hello claiming group {peer_id} from {session.principal!r} "
                f"at {session.peer}: {problem}"
            )
            self._refuse("auth", peer_id, session, line, problem, Status.NOTAUTHORIZED)
        incarnations = self.incarnations
        if incarnations is None:  # not on a majority yet (`_start_when_answerable`)
            raise wire.RemoteProtocolError(
                f"group {self.config.id} {PEER_STARTING}",
                Status.LINK_DOWN,
            )
        self._admit_journals(incarnations, session, hello, linked=link.channel is not None)
        session.send(link_welcome(self.config, incarnations, hello))
        session.link = link
        link.up(session)

    def _admit_journals(
        self,
        incarnations: PeerIncarnations,
        session: ServerSession,
        hello: wire.Hello,
        *,
        linked: bool,
    ) -> None:
        """Refuse (`_refuse`, LINK_DOWN) a Hello whose journals or term this group
        does not take, or whose first incarnation or higher term it cannot record.
        Why the last: on a full disk the commit raised out of the Hello, logged as a
        traceback at each redial (every 2 s) and answered with no request id, so the
        dialer said "Failure.request_id must be 1..2**63-1, got 0" and this group
        "protocol error"; now one line each side says the journal is full, and the
        link comes up at the first redial after the disk has room."""
        peer_id = hello.group
        try:
            problem = incarnations.admit(peer_id, hello.incarnation, linked=linked)
            kind = f"journals {hello.incarnation.hex()}" if hello.incarnation else "no journals"
            if problem is None:
                problem, kind = incarnations.admit_term(peer_id, hello.term), "old term"
        except JournalError as error:  # a full disk or map: nothing recorded, none taken
            problem, kind = f"cannot record group {peer_id}'s journals here: {error}", "journal"
        if problem is not None:
            # Each set of journals its own line: a stray process on other journals
            # and a rebuilt group dialing at once are two things to act on.
            line = f"refused link: {problem} ({session.peer})"
            self._refuse(kind, peer_id, session, line, problem, Status.LINK_DOWN)

    def _refuse(
        self,
        kind: str,
        peer_id: int,
        session: ServerSession,
        line: str,
        answer: str,
        status: Status = Status.PROTOCOL_ERROR,
    ) -> NoReturn:
        """Log a refused link Hello (`line`) and raise the dialer's answer. One line per
        (kind, claimed group, host) per REFUSAL_LOG_INTERVAL_S, with the count of those
        not shown (logged by `flush_all` when the interval ends, if no line comes).
        Why per kind and per group: keyed on the host alone, the first refusal hid
        every other for the interval (a rebuilt group's journals, then a stray
        process's, a group claiming to be another), and the operator fixed the first
        problem without hearing of the second. The error says it was logged, so the
        connection's protocol-error line, whose slot every protocol error of the host
        shares, does not say it again (mrs.server.connections)."""
        self.refusals.refused(
            f"link Hello of group {peer_id}", session.host, line, key=(kind, peer_id, session.host)
        )
        raise LinkHelloRefused(answer, status)


def link_welcome(
    config: GroupConfig, incarnations: PeerIncarnations, hello: wire.Hello
) -> wire.Welcome:
    """The Welcome of an adopted link, in the shape its dialer reads. A dialer of an
    earlier release refuses a Welcome with a field it does not know: one that says no
    incarnation (admitted only from a peer whose links never brought one) is answered
    without one, and only one that set `welcome_term` is told this group's term (a
    replicated group's), so it refuses this instance if it is an old active. A
    replicated dialer of the release before says its own term but reads none."""
    own = incarnations.own if hello.incarnation else b""
    term = incarnations.term if hello.welcome_term else 0
    return wire.Welcome(
        wire.PROTOCOL_VERSION,
        config.id,
        config.name,
        config.limits.message_bytes_max,
        own,
        term,
    )


class LinkHelloRefused(wire.RemoteProtocolError):
    """A link Hello refused and logged by `PeerLinks.adopt`: the connection ends with
    its answer and logs nothing more."""
