"""Client credentials: open a connection and authenticate before the first frame.

    creds = ClientCredentials("app1", "s3cret")
    async with connect("127.0.0.1:7001", queue="1.10", credentials=creds) as q: ...

The password stays in this process: the server gets a SCRAM proof bound to fresh
nonces (mrs.security.handshake). Tools started from the shell (`mrs status`,
`mrs jplay`, `mrs dlq-handler`) take their credentials from MRS_AUTH_NAME and
MRS_AUTH_PASSWORD_FILE (or MRS_AUTH_PASSWORD), read once by the `mrs` command.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from clients.errors import ConnectionLost, error_for
from clients.tls import tls_refusal
from mrs.model import Status
from mrs.security.handshake import AuthFailed, ClientCredentials, authenticate

__all__ = ["ClientCredentials", "authenticating_opener", "default_credentials", "set_default"]

_default: ClientCredentials | None = None


def set_default(credentials: ClientCredentials | None) -> None:
    """Credentials for connect() calls that give none (set once by the CLI edge)."""
    global _default
    _default = credentials


def default_credentials() -> ClientCredentials | None:
    return _default


def authenticating_opener(
    credentials: ClientCredentials,
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None,
) -> Callable[[str, int], Awaitable[trio.abc.Stream]]:
    """Wrap a stream opener (TCP by default) so each new stream is authenticated."""
    opener = open_stream or trio.open_tcp_stream

    async def open_authenticated(host: str, port: int) -> trio.abc.Stream:
        stream = await opener(host, port)
        try:
            await authenticate(stream, credentials)
        except AuthFailed as failed:
            await trio.aclose_forcefully(stream)
            if failed.status == Status.LINK_DOWN:
                raise ConnectionLost(failed.status, failed.message) from None
            raise error_for(failed.status, failed.message) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            await trio.aclose_forcefully(stream)
            if (refused := tls_refusal(error, f"{host}:{port}")) is not None:
                raise refused from None  # TLS 1.3: a refused client cert shows up here
            raise ConnectionLost(Status.LINK_DOWN, f"authentication cut off: {error}") from None
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream

    return open_authenticated
