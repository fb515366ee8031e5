"""When two listening addresses of a config are one listener on one machine.

Config checks compare addresses as keys; the same port spelled `localhost` and
`127.0.0.1` is one listener, and a wildcard host takes the port on every address.
"""

from __future__ import annotations

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "*"})
"""Hosts that take the port on every address of the machine."""


LOOPBACK_NAMES = {"localhost": "127.0.0.1", "ip6-localhost": "::1"}
"""Host names every machine resolves to its own loopback address."""


def same_address(host: str, port: int) -> tuple[str, int]:
    """The key two addresses of one machine share when they take the same port:
    `localhost:7001` and `127.0.0.1:7001` are one listener (a config that spelled
    them differently started a second instance on a running one's port)."""
    return LOOPBACK_NAMES.get(host.lower(), host), port
