"""A TLS stream whose writes are on the socket before they yield.

Why: `trio.SSLStream` takes a lock around each write to its socket, and taking even a
free trio lock is a checkpoint, so the scheduler may run other ready tasks before the
bytes leave. A replicated group's active spends much of its loop in inline commits:
over TLS, each record it streamed and each acknowledgement a replica sent back waited
for whatever commit the scheduler ran first (benchmarks/README.md, "The replication
link over TLS"). Here, as a plain socket's write does (mrs.transport.plain_socket),
every byte of a write is handed to the socket before the write's checkpoint, and a
record can be encrypted and written without awaiting at all (`send_nowait`).

It is `ssl.SSLObject` over memory BIOs, as trio's own stream is, with trio's stream
rules: one task at a time sends and one receives (BusyResourceError otherwise); SSL
errors come out as BrokenResourceError (their cause kept, for `describe_tls_error`);
a clean close_notify reads as b"", a connection cut without one is broken (unless
the context ignores unexpected EOFs: see mrs.config.tls `strict_eof`); a write
interrupted part way (cancelled) leaves the stream broken, since a TLS record cannot
be resumed. Bytes the receiving side makes (a TLS 1.3 KeyUpdate answer) wait in the
outgoing BIO for the next write.
"""

from __future__ import annotations

import contextlib
import os
import ssl

import trio

from mrs.limits import RECEIVE_BYTES_MAX
from mrs.transport.plain_socket import receive_plain, send_all_plain

_SSL_FAILURES = (ssl.SSLError, ssl.CertificateError)
_HANDSHAKE_READ_BYTES = 1 << 16


class TlsStream(trio.abc.Stream):
    """TLS on a connected TCP stream, after `tls_handshake`."""

    def __init__(
        self,
        transport_stream: trio.SocketStream,
        ssl_object: ssl.SSLObject,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
    ) -> None:
        self.transport_stream = transport_stream
        self.socket = transport_stream.socket
        """The TCP socket (peer addresses, as on a plain SocketStream)."""
        self._ssl = ssl_object
        self._incoming = incoming
        self._outgoing = outgoing
        self._unsent = b""
        """Ciphertext `send_nowait` could not hand to the socket: the next send's first."""
        self._sending = False
        self._receiving = False
        self._broken = False
        self._closed = False

    def getpeercert(self, binary_form: bool = False) -> dict | bytes | None:
        return self._ssl.getpeercert(binary_form)  # type: ignore[call-overload, no-any-return]

    # -- sending ------------------------------------------------------------------

    def send_nowait(self, data: bytes) -> bool:
        """Encrypt `data` and write it now, without a checkpoint. False (nothing done)
        while a send is under way or bytes of an earlier call wait: the caller keeps
        `data` for its next `send_all` (its outbox, with its bound). What the socket
        does not take of this call is written first by the next `send_all`, so at
        most one call's bytes wait here."""
        if self._sending or self._unsent or self._closed or self._broken:
            return False
        pending = self._encrypt(data)
        written = 0
        try:
            written = os.write(self.socket.fileno(), pending)
        except BlockingIOError:
            pass
        except OSError:  # closed or broken: the next send or receive says so
            self._broken = True
        self._unsent = pending[written:]
        return True

    @property
    def unsent_bytes(self) -> int:
        """Ciphertext `send_nowait` left for the next send."""
        return len(self._unsent)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._check_open()
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this TLS stream")
        self._sending = True
        try:
            pending = self._unsent + self._encrypt(bytes(data))
            self._unsent = b""
            await send_all_plain(self.socket, pending)
        except BaseException:
            self._broken = True  # part of a record may be out: it cannot be resumed
            raise
        finally:
            self._sending = False

    def _encrypt(self, data: bytes) -> bytes:
        if data:
            try:
                self._ssl.write(data)
            except _SSL_FAILURES as error:
                self._broken = True
                raise trio.BrokenResourceError(f"TLS write failed: {error}") from error
        return self._outgoing.read()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    # -- receiving ----------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        self._check_open()
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this TLS stream")
        self._receiving = True
        try:
            return await self._receive(max_bytes or RECEIVE_BYTES_MAX)
        finally:
            self._receiving = False

    async def _receive(self, max_bytes: int) -> bytes:
        """Decrypted bytes, reading the socket as needed; one checkpoint per call (the
        socket read's, or one of its own when the bytes were decrypted already)."""
        read = False
        while True:
            try:
                data = self._ssl.read(max_bytes)
            except ssl.SSLWantReadError:
                if self._incoming.eof:
                    self._broken = True
                    raise trio.BrokenResourceError("the TLS stream ended part way") from None
                raw = await receive_plain(self.socket, RECEIVE_BYTES_MAX)
                read = True
                if raw:
                    self._incoming.write(raw)
                else:  # the SSL object judges the end: an error without close_notify
                    self._incoming.write_eof()  # (`strict_eof` contexts), else b""
                continue
            except ssl.SSLZeroReturnError:  # the peer's close_notify
                data = b""
            except _SSL_FAILURES as error:
                self._broken = True
                raise trio.BrokenResourceError(f"TLS read failed: {error}") from error
            if not read:
                await trio.lowlevel.checkpoint()
            return data

    # -- closing ------------------------------------------------------------------

    async def aclose(self) -> None:
        """Send close_notify if the socket takes it at once (never wait for it), then
        close the socket."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        if not (self._broken or self._sending):
            with contextlib.suppress(*_SSL_FAILURES, OSError):
                self._ssl.unwrap()
            with contextlib.suppress(OSError):  # BlockingIOError included
                os.write(self.socket.fileno(), self._unsent + self._outgoing.read())
        await self.transport_stream.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this TLS stream was closed")
        if self._broken:
            raise trio.BrokenResourceError("this TLS stream is broken")


async def tls_handshake(
    transport_stream: trio.SocketStream,
    context: ssl.SSLContext,
    *,
    server_side: bool,
    server_hostname: str | None = None,
    received: bytes = b"",
) -> TlsStream:
    """TLS over a connected TCP stream, once the handshake is done (certificates
    checked as `context` says); `received`: its first bytes, already read (a server
    looks at them to tell TLS from a plaintext client). BrokenResourceError, with the
    SSL error as its cause, when it fails or the peer goes away during it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    incoming.write(received)
    ssl_object = context.wrap_bio(
        incoming, outgoing, server_side=server_side, server_hostname=server_hostname
    )
    while True:
        try:
            ssl_object.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
            if incoming.eof:
                raise trio.BrokenResourceError("the peer closed during the TLS handshake") from None
        except _SSL_FAILURES as error:
            if outgoing.pending:  # the alert that tells the peer why
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await transport_stream.send_all(outgoing.read())
            raise trio.BrokenResourceError(f"TLS handshake failed: {error}") from error
        if outgoing.pending:
            await transport_stream.send_all(outgoing.read())
        if done:
            return TlsStream(transport_stream, ssl_object, incoming, outgoing)
        data = await transport_stream.receive_some(_HANDSHAKE_READ_BYTES)
        if data:
            incoming.write(data)
        else:  # the SSL object says why (a server that refused our certificate closed)
            incoming.write_eof()
