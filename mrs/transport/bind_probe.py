"""Whether a listening address can be bound now: a TCP bind of each of its addresses,
tried and let go.

Why: a replicated instance binds its client port only once it becomes active, and a
port another process holds must be found before it campaigns: an instance that could
not listen once active left its group with a term and no active. The addresses are
bound as `trio.open_tcp_listeners` binds them (the server's own way), so what passes
here binds there. A port that must be free for a start to succeed is bound and held
instead (a group's `listen` and `[group.ops]` endpoints: mrs.server.group_server), as
a probe let go leaves the port to whoever takes it next.
"""

from __future__ import annotations

import socket


def try_bind(host: str | None, port: int) -> None:
    """Bind every address `host:port` resolves to and let them go; OSError (what the
    server's own bind would raise) if one cannot be bound."""
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            probe.bind(address)
