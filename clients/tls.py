"""TLS for applications: a context from CA/cert/key files, and the stream opener.

Why in the client library: an application holds its own client certificate (the
server never sees its key) and must verify the group's certificate before sending
a byte. A failed verification is `TlsRefused`, not a lost connection: it will not
get better by retrying, so the client does not retry it.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from clients.errors import BadParameter, ConnectionLost, MrsError
from mrs.config.tls import NOT_TLS, ssl_failure, strict_eof
from mrs.model import Status
from mrs.security.files import owner_only
from mrs.transport.tls_stream import tls_handshake

log = logging.getLogger("clients")

KEY_ADVICE = "make a new key and certificate for this client (docs/security.md)"

OpenStream = Callable[[str, int], Awaitable[trio.abc.Stream]]


_default: ssl.SSLContext | None = None


def set_default_tls(context: ssl.SSLContext | None) -> None:
    """TLS for connect() calls that give none (set once by the CLI edge, MRS_TLS_*)."""
    global _default
    _default = context


def default_tls() -> ssl.SSLContext | None:
    return _default


class TlsRefused(MrsError):
    """The TLS handshake failed: wrong CA, a name the certificate does not carry, no
    TLS on the server's port, or a client certificate the server does not accept."""


def tls_context(
    ca: str | Path, cert: str | Path | None = None, key: str | Path | None = None
) -> ssl.SSLContext:
    """Verify the server with `ca`; present `cert`/`key` when the group asks for a
    client certificate (`client_cert = "required"`). Verification is always on. A key
    file others may read is made owner-only (0600) with one WARNING naming it, as the
    group does with its own (mrs.security.files.owner_only): copied with `cp` under
    umask 022 it was 0644, and anyone on the machine could pose as the application."""
    if key is not None and cert is None:
        raise BadParameter(
            Status.BADPARAM, f"tls_context: key {key} given without its cert: give both"
        )
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert is not None:
            context.load_cert_chain(
                str(cert), None if key is None else str(key), password=_no_passphrase
            )
    except _EncryptedKey:
        raise BadParameter(
            Status.BADPARAM,
            f"tls_context: the key {key or cert} is encrypted (it has a passphrase), "
            "which MRS does not ask for: give it an unencrypted key (owner-only, 0600)",
        ) from None
    except (OSError, ssl.SSLError) as error:  # a file missing, unreadable or no PEM
        named = ", ".join(str(path) for path in (ca, cert, key) if path is not None)
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise BadParameter(Status.BADPARAM, f"tls_context: cannot load {named}: {why}") from None
    if cert is not None:  # the key, or the certificate file that holds it
        owner_only(Path(key if key is not None else cert), "TLS private key", log, KEY_ADVICE)
    return context


class _EncryptedKey(Exception):
    """The private key asked for a passphrase."""


def _no_passphrase() -> bytes:
    """OpenSSL's password callback: called only for an encrypted key. Without it,
    OpenSSL prompted `Enter PEM pass phrase:` on the terminal, blocking the program
    (and the event loop), and without a terminal failed as `Invalid argument`."""
    raise _EncryptedKey


def tls_opener(context: ssl.SSLContext, server_name: str | None = None) -> OpenStream:
    """open_stream for `Client`: TCP, then a finished TLS handshake with the server
    verified as `server_name` (default: the host dialed), as the group's own TLS
    stream (mrs.transport.tls_stream: a request's bytes leave before it yields).
    Every client context passes here, ours (`tls_context`) or the application's:
    `strict_eof` is set once, here (a refused certificate must read as TlsRefused,
    not as a drop to retry)."""
    strict_eof(context)

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        stream = await trio.open_tcp_stream(host, port)
        try:
            tls_stream = await tls_handshake(
                stream, context, server_side=False, server_hostname=server_name or host
            )
        except BaseException as error:
            await trio.aclose_forcefully(stream)
            refused = tls_refusal(error, f"{host}:{port}")
            if refused is not None:
                raise refused from None
            if isinstance(error, trio.BrokenResourceError):  # reset, not a TLS verdict
                raise ConnectionLost(
                    Status.LINK_DOWN, f"TLS handshake with {host}:{port} cut off: {error}"
                ) from None
            raise
        return tls_stream

    return open_stream


def tls_refusal(error: BaseException, address: str) -> TlsRefused | None:
    """TlsRefused when `error` is a failed TLS handshake (with TLS 1.3 a server that
    refuses our certificate says so on the first read, after do_handshake returned);
    None if it is no TLS failure (a refused or reset TCP connection: the usual
    reconnect rules apply)."""
    reason = ssl_failure(error)
    if reason is None:
        return None
    if reason == NOT_TLS:
        reason += ": is it a group without [group.tls]? connect to it without tls"
    return TlsRefused(Status.LINK_DOWN, f"TLS handshake with {address} failed: {reason}")
