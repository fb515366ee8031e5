"""TLS on real TCP: bounded handshakes, plaintext clients refused clearly, links verified by name.

Accepted connections are told apart by their first byte (a TLS record, or an MRS
frame from a client without TLS, answered with a Fatal saying so); handshakes in
progress are bounded per host and in all, and at a bound the oldest handshake gives
way to the new connection (`HandshakeSlots`): idle sockets cannot hold the slots
and lock everyone else out. Refused connections are closed gently (bounded) so a
client sees the end of the stream, not a reset. The TLS streams are
mrs.transport.tls_stream's: an answer's bytes reach the socket before its write
yields, so a commit the loop runs next does not hold it back.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from typing import Any

import trio

from mrs import protocol as wire
from mrs.config.addresses import host_port
from mrs.config.schema import ConfigError
from mrs.config.tls import PLAINTEXT_REFUSAL, TlsConfig, describe_tls_error, group_server_name
from mrs.core.refusals import RefusalLog
from mrs.limits import TLS_REFUSAL_LOG_INTERVAL_S
from mrs.model import Status
from mrs.security.files import owner_only
from mrs.transport.handshake_slots import HandshakeSlots
from mrs.transport.network import Gate, Handler, TcpNetwork
from mrs.transport.tls_stream import TlsStream, tls_handshake

log = logging.getLogger("mrs.tls")

HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS handshake not done by then is dropped: a silent client holds nothing longer."""
HANDSHAKES_PER_HOST_MAX = 64
"""TLS handshakes in progress from one host; a new one makes the host's oldest give way."""
HANDSHAKES_MAX = 1024
"""TLS handshakes in progress from everyone; a new one makes the oldest give way."""
FIRST_READ_BYTES_MAX = 16384
"""Bytes read to tell a TLS ClientHello from a plaintext MRS frame."""
CLOSE_DRAIN_S = 1.0
"""After a refused handshake: how long to read what the peer still sends (no RST)."""
CLOSE_DRAIN_BYTES_MAX = 65536
"""... and how much of it."""
CLOSE_DRAINS_MAX = 64
"""Refused connections being closed gently at once; more are closed at once."""
TLS_HANDSHAKE_RECORD = b"\x16"
"""The first byte of every TLS connection (a handshake record: the ClientHello)."""
KEY_ADVICE = "make a new key and certificate for this group (docs/security.md)"


class TlsNetwork(TcpNetwork):
    """Real TCP with TLS on top: every accepted connection and every dial."""

    def __init__(self, config: TlsConfig, peer_names: dict[tuple[str, int], str]) -> None:
        self.config = config
        self.peer_names = peer_names
        """(host, port) dialed -> the name its certificate must carry (mrs-group-N)."""
        self._key_checked: ssl.SSLContext | None = None
        """The server context whose key file was last made owner-only (`server_context`)."""
        self._serving_context()  # built now: files that do not load fail the start
        config.dial_context()
        self.refused = 0
        """Handshakes that failed (plaintext clients, wrong CA, no certificate, bounds)."""
        self._slots = HandshakeSlots(HANDSHAKES_PER_HOST_MAX, HANDSHAKES_MAX)
        self._draining = 0
        self._refusals = RefusalLog(
            log,
            every_s=TLS_REFUSAL_LOG_INTERVAL_S,
            level=logging.INFO,
            line_format="TLS handshake from {peer} refused: {message}",
        )

    @property
    def server_context(self) -> ssl.SSLContext:
        """The context of the certificate files as they are now (a replaced
        certificate is served from the next handshake: TlsConfig._current). Each time
        it is built (at start, after the files changed) the private key is made
        owner-only, as the link secret is: a key copied with `cp` under umask 022
        was left readable by every local user, who could then pose as this group."""
        return self._serving_context()

    def _serving_context(self) -> ssl.SSLContext:
        context = self.config.server_context()
        if context is not self._key_checked:
            self._key_checked = context
            owner_only(self.config.key, "TLS private key", log, KEY_ADVICE)
        return context

    @property
    def dial_context(self) -> ssl.SSLContext:
        return self.config.dial_context()

    async def serve_listeners(
        self,
        handler: Handler,
        host: str,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED,
        gate: Gate | None = None,
    ) -> None:
        await super().serve_listeners(
            self._tls_handler(handler), host, listeners, task_status=task_status, gate=gate
        )

    def _tls_handler(self, handler: Handler) -> Handler:
        async def handle(stream: trio.abc.Stream) -> None:
            peer = peer_address(stream)
            host = peer.rpartition(":")[0]
            tls_stream: TlsStream | None = None
            with trio.CancelScope() as scope:
                slot = self._slots.take(host, scope)
                try:
                    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                        tls_stream = await self._handshake(stream)
                except (trio.BrokenResourceError, trio.TooSlowError, OSError, NotTls) as error:
                    self._refuse(peer, _why(error))
                finally:
                    self._slots.give_back(slot)
            if scope.cancelled_caught and slot.evicted_because is not None:
                self._refuse(peer, slot.evicted_because)
                await trio.aclose_forcefully(stream)  # idle or slow: no gentle close
                return
            if tls_stream is None:
                await self._close_refused(stream)
                return
            await handler(tls_stream)

        return handle

    async def _handshake(self, stream: trio.abc.Stream) -> TlsStream:
        """Look at the first bytes: a TLS record goes on to the handshake; an MRS frame
        (a plaintext client) is answered with a Fatal saying this port speaks TLS, so
        the client stops with a clear error instead of reconnecting forever."""
        first = await stream.receive_some(FIRST_READ_BYTES_MAX)
        if first[:1] != TLS_HANDSHAKE_RECORD:
            if first[:1] == b"\0":  # a frame's length prefix: an MRS client without TLS
                fatal = wire.Connection("server").send(
                    wire.Fatal(int(Status.PROTOCOL_ERROR), PLAINTEXT_REFUSAL)
                )
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(fatal)
                raise NotTls("a plaintext MRS client (answered: TLS only)")
            raise NotTls("not a TLS handshake" if first else "closed before a TLS handshake")
        assert isinstance(stream, trio.SocketStream)  # TcpNetwork's: a real TCP connection
        return await tls_handshake(
            stream, self.server_context, server_side=True, received=bytes(first)
        )

    async def _close_refused(self, stream: trio.abc.Stream) -> None:
        """Gently (see _close_gently) while fewer than CLOSE_DRAINS_MAX are at it;
        beyond that a flood of refused connections is closed at once."""
        if self._draining >= CLOSE_DRAINS_MAX:
            await trio.aclose_forcefully(stream)
            return
        self._draining += 1
        try:
            await _close_gently(stream)
        finally:
            self._draining -= 1

    def _refuse(self, peer: str, why: str) -> None:
        """Count it; log it, at most one line per (host, reason) a second (a flood of
        junk connections must not flood the log; a new reason is logged at once)."""
        self.refused += 1
        host = peer.rpartition(":")[0]
        self._refusals.refused("tls", peer, why, key=(host, why))

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """Dial and finish the handshake (a wrong certificate fails here, clearly)."""
        stream = await trio.open_tcp_stream(host, port)
        name = self.peer_names.get((host, port), host)
        try:
            tls_stream = await tls_handshake(
                stream, self.dial_context, server_side=False, server_hostname=name
            )
        except BaseException as error:
            await trio.aclose_forcefully(stream)
            if isinstance(error, trio.BrokenResourceError | OSError):
                raise ConnectionError(
                    f"TLS to {host_port(host, port)} ({name}): {_why(error)}"
                ) from None
            raise
        return tls_stream


async def _close_gently(stream: trio.abc.Stream) -> None:
    """FIN, then read what the peer still sends, then close: closing with unread data
    would send an RST, and a TLS 1.3 client whose certificate was refused (it has
    already sent its first frame) would see "connection reset" instead of the end of
    the TLS stream, a failure it cannot tell from a crash. Bounded in time and bytes."""
    with (
        trio.move_on_after(CLOSE_DRAIN_S),
        contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
    ):
        if isinstance(stream, trio.abc.HalfCloseableStream):
            await stream.send_eof()
        drained = 0
        while drained < CLOSE_DRAIN_BYTES_MAX:
            data = await stream.receive_some(FIRST_READ_BYTES_MAX)
            if not data:
                break
            drained += len(data)
    await trio.aclose_forcefully(stream)


class NotTls(Exception):
    """The first bytes of an accepted connection are not a TLS handshake."""


def tls_network(bus: Any, group: Any) -> TlsNetwork:
    """The TLS network of `group` (its config has `tls`): each group it dials is
    verified by the name mrs-group-N at the address it dials (a link's address, or
    the peer's listen address, or each of a replicated peer's instances': before, only
    the first instance's was named, and the others were checked against their IP
    address, which `mrs certs` does not put in the certificate).

    ConfigError (one line, `mrs serve` does not start) when the group's certificate
    or CA has expired (one not valid yet is let be, see `TlsConfig.validity_problem`),
    or its certificate does not name mrs-group-N while peers verify that name
    (`TlsConfig.start_problem`): before, the group served and refused every client
    and peer with a line that blamed them."""
    if (problem := group.tls.start_problem(group)) is not None:
        raise ConfigError(bus.path, f"group {group.id} [group.tls]", problem)
    peer_names: dict[tuple[str, int], str] = {}
    for peer_id in group.linked_group_ids:
        link = bus.link_between(group.id, peer_id)
        if link is not None and link.address_host is not None:
            address = (link.address_host, link.address_port)
        else:
            peer = bus.group(peer_id)
            address = (peer.listen_host, peer.listen_port)
            for instance in peer.instances:  # a replicated peer's link dials each in turn
                peer_names[(instance.listen_host, instance.listen_port)] = group_server_name(
                    peer_id
                )
        peer_names[address] = group_server_name(peer_id)
    return TlsNetwork(group.tls, peer_names)


def _why(error: BaseException) -> str:
    if isinstance(error, NotTls):
        return str(error)
    if isinstance(error, trio.TooSlowError):
        return f"no handshake within {HANDSHAKE_TIMEOUT_S:.0f} s"
    return describe_tls_error(error)


def peer_address(stream: trio.abc.Stream) -> str:
    """host:port of the far end of a TCP stream ("?" when it cannot be told)."""
    try:
        host, port = stream.socket.getpeername()[:2]  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return "?"
    return host_port(host, port)


def transport_socket(stream: trio.abc.Stream) -> Any:
    """The socket under a TCP or TLS stream (for the peer address, SO_LINGER)."""
    while isinstance(stream, trio.SSLStream | TlsStream):
        stream = stream.transport_stream
    return stream.socket  # type: ignore[attr-defined]


def check_link_peer(stream: trio.abc.Stream, group_id: int) -> str | None:
    """None when a link claiming to be `group_id` may proceed, else why not: over
    TLS with a client certificate, the certificate must name mrs-group-N."""
    if not isinstance(stream, trio.SSLStream | TlsStream):
        return None
    names = certificate_names(stream)
    if names is None:
        return None  # no client certificate asked for: TLS protects the wire only
    if group_server_name(group_id) in names:
        return None
    shown = ", ".join(sorted(names)) or "no DNS names"
    return f"link claims group {group_id} but its certificate names {shown}"


def certificate_names(stream: trio.SSLStream | TlsStream) -> set[str] | None:
    """The DNS names of the peer's certificate (None: it showed none)."""
    certificate = stream.getpeercert()
    if not certificate or not isinstance(certificate, dict):
        return None
    return {value for kind, value in certificate.get("subjectAltName", ()) if kind == "DNS"}
