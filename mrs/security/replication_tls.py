"""TLS on a replicated group's replication link, both ends proving they are the group.

Why: the link carries every commit of the group, and its hello raises a replica's
term. A stranger who reaches a replica's replication address could fence the active
off (a hello of a newer term) or read every message. With `[group.tls]`, the
instances of a group (which share that table: one certificate for the group) speak
TLS to each other, and each end checks the other holds a certificate of the group's
CA naming the group (`mrs-group-N`, what `mrs certs` writes):

- the replica requires a client certificate, whatever `client_cert` says (that
  setting is the client port's), and refuses one naming another group or nothing;
- the active verifies the replica's certificate by that name, as a link verifies
  the group it dials.

A refused connection is closed and logged (one line per peer and reason a second);
handshakes in progress are bounded, so idle strangers cannot hold the replica's
address. Without `[group.tls]` the link is plain TCP (docs/replication.md).

The stream is mrs.transport.tls_stream's, not trio's: its writes reach the socket
before they yield, and the commit loop encrypts and writes each record before its own
fsync as it does on plain TCP (mrs.replication.link_out); over trio's stream each
record and each acknowledgement waited for a commit (benchmarks/README.md).
"""

from __future__ import annotations

import logging
import ssl

import trio

from mrs.config.addresses import host_port
from mrs.config.tls import TlsConfig, describe_tls_error, group_server_name
from mrs.core.refusals import RefusalLog
from mrs.limits import TLS_REFUSAL_LOG_INTERVAL_S
from mrs.security.tls_network import HANDSHAKE_TIMEOUT_S, certificate_names, peer_address
from mrs.transport.network import Gate, Handler, TcpNetwork
from mrs.transport.tls_stream import tls_handshake

log = logging.getLogger("mrs.replication")

REPLICATION_HANDSHAKES_MAX = 8
"""TLS handshakes in progress on a replica's address; more are closed at once (the
active needs one; a crowd is strangers)."""


class ReplicationTls(TcpNetwork):
    """The replication link's network: TCP with mutual TLS, both ends group `group_id`."""

    def __init__(self, config: TlsConfig, group_id: int) -> None:
        self.group_id = group_id
        self.name = group_server_name(group_id)
        self.config = config
        config.mutual_server_context()  # built now: files that do not load fail the start
        config.dial_context()
        self.refused = 0
        self._handshakes = 0
        self._refusals = RefusalLog(
            log,
            every_s=TLS_REFUSAL_LOG_INTERVAL_S,
            level=logging.WARNING,
            line_format="replication link {peer} refused: {message}",
        )

    @property
    def server_context(self) -> ssl.SSLContext:
        """The context of the group's certificate files as they are now: a replica
        whose files were replaced proves itself with the new ones at its next link
        (TlsConfig._current), as it serves them once it becomes active."""
        return self.config.mutual_server_context()

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
        """Every way of serving goes through here (`serve` binds, then calls it): a
        replica serving listeners bound before takes TLS links too."""
        await super().serve_listeners(
            self._accepted(handler), host, listeners, task_status=task_status, gate=gate
        )

    def _accepted(self, handler: Handler) -> Handler:
        async def handle(stream: trio.abc.Stream) -> None:
            peer = f"from {peer_address(stream)}"
            if self._handshakes >= REPLICATION_HANDSHAKES_MAX:
                self._refuse(peer, f"{REPLICATION_HANDSHAKES_MAX} handshakes already under way")
                await trio.aclose_forcefully(stream)
                return
            self._handshakes += 1
            assert isinstance(stream, trio.SocketStream)  # TcpNetwork's: a real TCP connection
            try:
                with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                    tls_stream = await tls_handshake(stream, self.server_context, server_side=True)
                why = self._not_the_group(certificate_names(tls_stream) or set())
            except (trio.BrokenResourceError, trio.TooSlowError, OSError) as error:
                why = (
                    f"no handshake within {HANDSHAKE_TIMEOUT_S:.0f} s"
                    if isinstance(error, trio.TooSlowError)
                    else describe_tls_error(error)
                )
            finally:
                self._handshakes -= 1
            if why is not None:
                self._refuse(peer, why)
                await trio.aclose_forcefully(stream)
                return
            await handler(tls_stream)

        return handle

    def _not_the_group(self, names: set[str]) -> str | None:
        """Why a certificate of the CA is not this group's (None: it is)."""
        if self.name in names:
            return None
        shown = ", ".join(sorted(names)) or "no DNS names"
        return f"its certificate names {shown}, not {self.name}: not an instance of this group"

    def _refuse(self, peer: str, why: str) -> None:
        """`peer`: "from HOST:PORT" (a dial taken) or "to HOST:PORT" (a dial made)."""
        self.refused += 1
        self._refusals.refused("replication", peer, why, key=(peer.rpartition(":")[0], why))

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """Dial a replica and verify it is an instance of this group (ConnectionError,
        an OSError, when not: the active dials again later, as for a refused dial)."""
        stream = await trio.open_tcp_stream(host, port)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                tls_stream = await tls_handshake(
                    stream, self.dial_context, server_side=False, server_hostname=self.name
                )
        except (trio.BrokenResourceError, trio.TooSlowError, OSError) as error:
            await trio.aclose_forcefully(stream)
            why = describe_tls_error(error) if not isinstance(error, trio.TooSlowError) else ""
            self._refuse(f"to {host_port(host, port)}", why or "no handshake in time")
            raise ConnectionError(f"TLS to replica {host_port(host, port)}: {why}") from None
        return tls_stream
