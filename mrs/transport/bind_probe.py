"""Whether a listening address can be bound now: a TCP bind of each of its addresses,
tried and let go.

Why: a server binds some of its ports only once it serves (a replicated instance its
client port when it becomes active; a group its `[group.ops]` endpoints after its
journals are open), and a port another process holds must be found before that: an
instance that could not listen once active left its group with a term and no
active, and a group that could not bind its metrics port failed after bumping its
epoch. The addresses are bound as `trio.open_tcp_listeners` binds them (the
server's own way), so what passes here binds there.
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
