"""TLS for a group's port and its links: the `[group.tls]` table and trio SSL streams.

Why: without TLS anyone on the path reads message bodies and can pose as a group.
With `[group.tls]` a group serves TLS only (a plaintext client is refused at the
handshake, costing the server nothing but that connection), verifies the
certificate of every group it dials, and, with `client_cert = "required"`, admits
only clients (applications and other groups) holding a certificate of its CA.

    [group.tls]
    ca = "certs/ca.pem"           # verifies peers: linked groups, and clients' certificates
    cert = "certs/group-1.pem"    # this group's certificate (server, and client on links)
    key = "certs/group-1.key"
    client_cert = "required"      # or "optional", "none" (default: "none")

A group dialing a link checks the peer's certificate names `mrs-group-N` for the
group N it meant to reach (`mrs certs` writes that name into every group
certificate), so a certificate of the same CA issued to another group or to a client
cannot pose as that group. With `client_cert = "required"` the accepting side checks
the same for the group a link's Hello claims (`check_link_peer`). Paths are
relative to the config file; every file is read and checked when the config loads,
so a bad path or a key that does not match its certificate is a one-line config
error, not a failure on the first connection.

The parts: the config table and SSL contexts (`mrs.config.tls`), the TLS
network and stream checks (`mrs.security.tls_network`); this module re-exports them.
"""

from __future__ import annotations

from mrs.config.tls import (
    CLIENT_CERT_CHOICES,
    GROUP_NAME_PREFIX,
    TLS_KEYS,
    TlsConfig,
    check_link_tls,
    describe_tls_error,
    group_server_name,
    operator_connect_options,
    parse_tls,
)
from mrs.security.tls_network import (
    CLOSE_DRAIN_BYTES_MAX,
    CLOSE_DRAIN_S,
    CLOSE_DRAINS_MAX,
    FIRST_READ_BYTES_MAX,
    HANDSHAKE_TIMEOUT_S,
    HANDSHAKES_MAX,
    HANDSHAKES_PER_HOST_MAX,
    PLAINTEXT_REFUSAL,
    TLS_HANDSHAKE_RECORD,
    NotTls,
    TlsNetwork,
    check_link_peer,
    tls_network,
    transport_socket,
)

__all__ = [
    "CLIENT_CERT_CHOICES",
    "CLOSE_DRAINS_MAX",
    "CLOSE_DRAIN_BYTES_MAX",
    "CLOSE_DRAIN_S",
    "FIRST_READ_BYTES_MAX",
    "GROUP_NAME_PREFIX",
    "HANDSHAKES_MAX",
    "HANDSHAKES_PER_HOST_MAX",
    "HANDSHAKE_TIMEOUT_S",
    "PLAINTEXT_REFUSAL",
    "TLS_HANDSHAKE_RECORD",
    "TLS_KEYS",
    "NotTls",
    "TlsConfig",
    "TlsNetwork",
    "check_link_peer",
    "check_link_tls",
    "describe_tls_error",
    "group_server_name",
    "operator_connect_options",
    "parse_tls",
    "tls_network",
    "transport_socket",
]
