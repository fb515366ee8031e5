"""Hooks the group server calls: build the authority, authenticate a new connection.

Kept here so the server's own change is a few lines: `build` once at start,
`admit` before the protocol handshake of every connection, `link_problem` when a
link Hello arrives.
"""

from __future__ import annotations

import contextlib
import logging

import trio

from mrs import protocol as wire
from mrs.config.bus import BusConfig, GroupConfig
from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.model import Status
from mrs.security.authority import Authority
from mrs.security.creds import CredsError, link_principal
from mrs.security.gate import Gate
from mrs.security.handshake import AuthFailed

log = logging.getLogger("mrs.security")

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
_CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def build(bus: BusConfig, group: GroupConfig) -> tuple[Authority | None, Gate | None]:
    """(None, None) when [auth] is off; CredsError (one line) if the files are unusable."""
    if bus.auth is None:
        return None, None
    try:
        authority = Authority(bus.auth, group.id, group.linked_group_ids, bus)
    except CredsError as error:  # a file the config names: a config mistake, exit 2
        raise CommandError(str(error), EXIT_USAGE) from None
    for what, host in (
        ("web_listen", group.ops.web_host),
        ("metrics_listen", group.ops.metrics_host),
    ):
        if host is not None and host not in LOOPBACK_HOSTS:
            log.warning(
                "[auth] is on but %s listens on %s without authentication: "
                "bind it to 127.0.0.1 (docs/security-auth.md)",
                what,
                host,
            )
    return authority, Gate(authority, bus, group.id)


async def admit(authority: Authority, session, deadline_s: float, refusals) -> bool:
    """Authenticate a new connection within deadline_s; on success the session gets
    its principal (and the bytes read past the exchange go to its protocol parser).
    On failure answer, log who and why, and return False (the caller closes)."""
    failure: AuthFailed | None = None
    with trio.move_on_after(deadline_s) as scope:
        try:
            name, incarnation, rest = await authority.accept(session.stream)
        except AuthFailed as failed:
            failure = failed
        except _CONNECTION_ERRORS:
            return False
    if scope.cancelled_caught:
        failure = AuthFailed(Status.TIMEOUT, f"no authentication within {deadline_s:g} s")
    elif failure is None and (why := authority.revoked(name, incarnation)) is not None:
        # The credentials were reloaded while the exchange ran (the client's proof on
        # its way, the answer being sent), and a session without its principal yet is
        # not one `credentials_reloaded` ends: the leaked password's login went on
        # under the old incarnation. Checked here, with no await before the principal
        # is set below, so any later reload sees this session.
        failure = AuthFailed(Status.NOTAUTHORIZED, why, protocol_answer=True)
    if failure is not None:
        refusals.refused(
            "auth",
            session.host,
            f"authentication refused ({failure.status.name}): {failure.message} ({session.peer})",
            # One line per kind of failure of a host, not per host: keyed on the host
            # alone, a wrong password went unlogged for 10 s after any other refusal
            # from its host (a tool without credentials, a reconnecting client), and
            # the count on the next line mixed the kinds. A fixed set of kinds (not
            # the name, which the peer chooses) keeps a flood to a few lines.
            key=("auth", session.host, failure.status, failure.protocol_answer),
        )
        with contextlib.suppress(*_CONNECTION_ERRORS), trio.move_on_after(1):
            if failure.protocol_answer:
                fatal = session.connection.send(wire.Fatal(int(failure.status), failure.message))
                await session.stream.send_all(fatal)
            else:
                await authority.refuse(session.stream, failure)
        return False
    session.principal = name
    session.principal_incarnation = incarnation
    log.info("connection from %s authenticated as %r", session.peer, name)
    if rest:
        session.connection.receive_data(rest)
    return True


def link_problem(authority: Authority | None, session, peer_id: int) -> str | None:
    """A link Hello for peer_id: None when the connection proved it is that group (or
    [auth] is off), else why not. The caller logs it (rate-limited: a misconfigured
    peer dials again every few seconds, forever; mrs.server.links) and refuses the
    Hello NOTAUTHORIZED."""
    if authority is None:
        return None
    expected = link_principal(peer_id)
    if session.principal == expected:
        return None
    return f"a link from group {peer_id} must authenticate as {expected!r}"
