"""When two listening addresses of a config are one listener on one machine.

Config checks compare addresses as keys; the same port spelled `localhost` and
`127.0.0.1` is one listener, and a wildcard host takes the port on every address.
"""

from __future__ import annotations

import ipaddress

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "*"})
"""Hosts that take the port on every address of the machine."""


LOOPBACK_NAMES = {"localhost": "127.0.0.1", "ip6-localhost": "::1"}
"""Host names every machine resolves to its own loopback address."""


def host_port(host: str, port: int | str) -> str:
    """`HOST:PORT` as the bus file spells it, an IPv6 host in brackets (`[::1]:7001`):
    the one way every line an operator reads (READY, the log, `mrs status`, errors)
    writes an address. Why: `::1:7001` was printed where the file refuses it ("an
    IPv6 host must be in brackets"), and a script cannot tell it from host `::1:7001`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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


def takes_local_port(host: str) -> bool:
    """Whether a listener on `host` holds its port for what this machine dials at
    home: a wildcard host, or a loopback one (`127.0.0.1`, `localhost`, `::1`)."""
    name = LOOPBACK_NAMES.get(host.lower(), host)
    if name in WILDCARD_HOSTS:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: where it points is the resolver's business
        return False


def overlap(host: str, other_host: str, port: int, other_port: int) -> bool:
    """Whether two listening addresses are one port on one machine: the same address
    (`same_address`), or a wildcard host and a loopback or wildcard one on the same
    port. Why the second: a group on `0.0.0.0:7001` holds 127.0.0.1:7001 too, so a
    group listening there could not start, and `mrs status` and the group's clients
    and links dialing it reached the other group and took it for this one."""
    if same_address(host, port) == same_address(other_host, other_port):
        return True
    wildcard = host in WILDCARD_HOSTS or other_host in WILDCARD_HOSTS
    return (
        port == other_port and wildcard and takes_local_port(host) and takes_local_port(other_host)
    )


def host_problem(host: str) -> str | None:
    """Why `host` can never be dialed or listened on, or None: the bus file's check
    (`mrs.config.fields`) and the client's (`clients.dialing`), one rule. Why: a NUL in
    the host was cut there by the C library (`127.0.0.1\\0junk` listened on 127.0.0.1,
    while `mrs status` dialed the whole string), and a label over 63 characters failed
    the socket's IDNA encoding, so `mrs serve` ended in "unexpected error:
    UnicodeError" and `mrs admin` quoted the codec."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in host):
        return "the host must not hold control characters"
    if ":" in host:  # an IPv6 literal (from brackets): not a name to encode
        return None
    try:
        host.encode("idna")  # what the socket calls do with a host name
    except UnicodeError:
        shown = host if len(host) <= 40 else host[:37] + "..."
        return (
            f"the host is not a host name ({shown!r}): each dot-separated part must be "
            "1 to 63 characters"
        )
    return None
