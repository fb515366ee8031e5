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


def parse_host_port(text: str, *, port_min: int = 0) -> tuple[str, int] | str:
    """(host, port) of `HOST:PORT` (an IPv6 host in brackets, `[::1]:8100`), or the
    problem with it in one line. Why through the bus file's own reader
    (`FieldReader.host_port`): `mrs web --listen` parsed addresses with code of its own,
    which took what the file refuses and said it in other words; the command line and
    the file now read an address one way and refuse it in the same words."""
    from pathlib import Path

    from mrs.config.fields import FieldReader
    from mrs.config.schema import ConfigError

    try:
        return FieldReader(Path()).host_port({"address": text}, "address", "", port_min=port_min)
    except ConfigError as error:
        return error.problem
