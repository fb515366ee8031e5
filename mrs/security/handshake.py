"""The authentication exchange that opens a connection to a group with auth on.

Before the first protocol frame (Hello), on the same stream, the client proves who
it is with SCRAM-SHA-256 (mrs.security.scram), in four small frames of the same
shape as protocol frames (4-byte big-endian length, msgpack) but maps, not lists:

    client -> {"auth": 1, "name": NAME, "nonce": CN}
    server -> {"auth": 1, "salt": S, "iterations": I, "nonce": SN, "group": G}
    client -> {"proof": P}
    server -> {"ok": true, "signature": SS [, "peer_proof": PP]}
           or {"ok": false, "status": NOTAUTHORIZED, "message": "..."}

P proves the password over AuthMessage (name, both nonces, salt, iterations and the
server's group id), so it is useless anywhere else; SS proves the server holds the
verifier. On a link, the dialing group authenticates as "group:N" and the accepting
group adds PP, a proof of its *own* link secret over the same AuthMessage, so each
group proves which group it is before a transfer is accepted (mutual).

A client that starts with a protocol frame instead (no credentials) is answered with
a protocol Fatal(NOTAUTHORIZED) and closed: it can do nothing but authenticate.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import msgpack
import trio

from mrs import protocol as wire
from mrs.config.tls import PLAINTEXT_REFUSAL
from mrs.model import Status
from mrs.protocol.connection import TLS_RECORD_START
from mrs.security import scram

AUTH_VERSION = 1
FRAME_BYTES_MAX = 4096
NAME_CHARS_MAX = 64
"""Principal names are 1-64 characters (mrs.security.creds.NAME_PATTERN)."""
_HEADER = struct.Struct(">I")
LINK_PROOF_SUFFIX = b"|link-peer"
FATAL_CODE = getattr(wire.Fatal, "code", 31)

NOTAUTHORIZED = Status.NOTAUTHORIZED
_T = TypeVar("_T")


class AuthFailed(Exception):
    """The exchange failed; status says how (NOTAUTHORIZED, PROTOCOL_ERROR, TIMEOUT)."""

    def __init__(self, status: Status, message: str, *, protocol_answer: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.protocol_answer = protocol_answer
        """Answer with a protocol Fatal frame: the peer spoke the protocol, not auth."""


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """A name and its password, held by an application (never sent)."""

    name: str
    password: str

    def __post_init__(self) -> None:
        """Refuse what can never authenticate, in one line that shows no password.
        Before, a password of bytes or None (`open(f, "rb").read()`, an unset
        variable) or one that is not text escaped the connect as AttributeError or
        UnicodeEncodeError from a worker thread, and a name no principal can have
        went to the group to be answered PROTOCOL_ERROR or `auth frame of N bytes`."""
        problem = _credentials_problem(self.name, self.password)
        if problem is not None:  # CredsError, as from_file: one line at the CLI edge too
            from mrs.security.creds import CredsError

            raise CredsError(f"credentials: {problem}")

    def __repr__(self) -> str:  # never print the password
        return f"ClientCredentials(name={self.name!r})"

    @classmethod
    def from_file(cls, name: str, path: str | os.PathLike[str]) -> ClientCredentials:
        """`name` with the password kept in the file at `path`, read as `mrs creds
        --password-file` reads it (surrounding whitespace and the final newline
        stripped), so the password an editor or `echo` saved is the one registered.
        An unreadable or empty file, or one of more lines than the password's,
        raises CredsError, one line naming the file."""
        from mrs.security.creds import PASSWORD_FILE, read_secret

        return cls(name, read_secret(Path(path), PASSWORD_FILE))


def _credentials_problem(name: object, password: object) -> str | None:
    """Why `name` and `password` can never authenticate (None: they may)."""
    from mrs.security.creds import name_problem

    if not isinstance(name, str):
        return f"the name must be a str, not {type(name).__name__}"
    if len(name) > NAME_CHARS_MAX:
        return f"a name of {len(name)} characters: principal names have 1-{NAME_CHARS_MAX}"
    if (problem := name_problem(name)) is not None:
        return problem
    if not isinstance(password, str):
        return (
            f"the password of {name!r} must be a str, not {type(password).__name__} "
            "(ClientCredentials.from_file reads a password file)"
        )
    try:
        password.encode("utf-8")
    except UnicodeEncodeError:
        return f"the password of {name!r} is not valid text (undecodable bytes)"
    return None


def auth_message(
    name: str, client_nonce: bytes, server_nonce: bytes, salt: bytes, iterations: int, group: int
) -> bytes:
    return msgpack.packb(
        [
            "mrs-scram-sha256",
            AUTH_VERSION,
            name,
            client_nonce,
            server_nonce,
            salt,
            iterations,
            group,
        ]
    )


def encode(frame: dict) -> bytes:
    body = msgpack.packb(frame)
    return _HEADER.pack(len(body)) + body


class FrameReader:
    """Reads whole frames from a stream; keeps what came after them (`rest`)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def frame(self) -> object:
        while True:
            if len(self.buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self.buffer)
                if self.buffer.startswith(TLS_RECORD_START):
                    raise AuthFailed(
                        Status.PROTOCOL_ERROR,
                        "a TLS handshake on a port without TLS (this group has no "
                        "[group.tls]): connect without tls",
                    )
                if size > FRAME_BYTES_MAX:
                    raise AuthFailed(Status.PROTOCOL_ERROR, f"auth frame of {size} bytes")
                if len(self.buffer) >= _HEADER.size + size:
                    body = bytes(self.buffer[_HEADER.size : _HEADER.size + size])
                    del self.buffer[: _HEADER.size + size]
                    return _decode(body)
            data = await self.stream.receive_some(FRAME_BYTES_MAX)
            if not data:
                raise AuthFailed(Status.LINK_DOWN, "connection closed during authentication")
            self.buffer += data

    def rest(self) -> bytes:
        return bytes(self.buffer)

    def after_answer(self) -> AuthFailed:
        """The refusal for bytes the server sent after its answer, unasked: a Fatal
        frame is the server's own refusal (a group that checks the principal once
        the exchange is over, and finds it removed and added again meanwhile, ends
        the connection at once); anything else is a protocol error. Why: that Fatal,
        read in the same receive as the answer, was "data after the authentication
        answer", as if the server had broken the protocol."""
        if len(self.buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.buffer)
            if size <= FRAME_BYTES_MAX and len(self.buffer) >= _HEADER.size + size:
                with contextlib.suppress(AuthFailed):
                    body = bytes(self.buffer[_HEADER.size : _HEADER.size + size])
                    if (refusal := fatal_of(_decode(body))) is not None:
                        return refusal
        return AuthFailed(Status.PROTOCOL_ERROR, "data after the authentication answer")


def _decode(body: bytes) -> object:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True, max_bin_len=FRAME_BYTES_MAX)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        raise AuthFailed(Status.PROTOCOL_ERROR, "malformed authentication frame") from None
    except Exception:  # noqa: BLE001 - msgpack raises a few more kinds on junk
        raise AuthFailed(Status.PROTOCOL_ERROR, "malformed authentication frame") from None


def field(frame: object, key: str, kind: type[_T], what: str) -> _T:
    if not isinstance(frame, dict) or not isinstance(frame.get(key), kind):
        raise AuthFailed(Status.PROTOCOL_ERROR, f"{what}: missing or bad {key!r}")
    value = frame[key]
    if kind is bytes and not 1 <= len(value) <= 256:
        raise AuthFailed(Status.PROTOCOL_ERROR, f"{what}: {key!r} has a bad length")
    return cast(_T, value)


def fatal_of(frame: object) -> AuthFailed | None:
    """A protocol Fatal frame (list) read where an auth frame was expected."""
    if isinstance(frame, list) and len(frame) == 3 and frame[0] == FATAL_CODE:
        status, message = frame[1], frame[2]
        try:
            status = Status(status)
        except ValueError:
            status = Status.PROTOCOL_ERROR
        return AuthFailed(status, str(message))
    return None


def _refusal(frame: object) -> AuthFailed:
    """The server's {"ok": false, ...} answer as an AuthFailed."""
    frame = frame if isinstance(frame, dict) else {}
    try:
        status = Status(frame.get("status", NOTAUTHORIZED))
    except ValueError:
        status = NOTAUTHORIZED
    return AuthFailed(status, str(frame.get("message") or "authentication refused"))


# -- client side ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proven:
    """What the client learnt: the group it reached, and the AuthMessage (links check
    the peer's proof over it)."""

    group: int
    auth_message: bytes
    peer_proof: bytes | None


async def authenticate(stream: trio.abc.Stream, credentials: ClientCredentials) -> Proven:
    """Run the client side on a fresh stream; AuthFailed if refused or the server's
    signature is wrong. The caller bounds the time (a cancel scope)."""
    reader = FrameReader(stream)
    client_nonce = scram.nonce()
    await stream.send_all(
        encode({"auth": AUTH_VERSION, "name": credentials.name, "nonce": client_nonce})
    )
    first = await reader.frame()
    if (refusal := fatal_of(first)) is not None:
        # A plaintext client at a TLS port is told so by the group before it reads
        # anything: that answer alone, as without credentials. Why: "the server does
        # not take authentication (this group speaks TLS only ...)" said auth was off
        # on a group that requires it, and sent the operator after the wrong setting.
        if refusal.status == Status.PROTOCOL_ERROR and refusal.message != PLAINTEXT_REFUSAL:
            refusal.message = f"the server does not take authentication ({refusal.message})"
        raise refusal
    if isinstance(first, dict) and first.get("ok") is False:
        raise _refusal(first)
    what = "server challenge"
    salt = field(first, "salt", bytes, what)
    iterations = field(first, "iterations", int, what)
    server_nonce = field(first, "nonce", bytes, what)
    group = field(first, "group", int, what)
    if not scram.ITERATIONS_MIN <= iterations <= scram.ITERATIONS_MAX:
        raise AuthFailed(Status.PROTOCOL_ERROR, f"{what}: iterations {iterations} out of range")
    message = auth_message(credentials.name, client_nonce, server_nonce, salt, iterations, group)
    salted = await trio.to_thread.run_sync(
        scram.salted_password, credentials.password, salt, iterations
    )
    await stream.send_all(encode({"proof": scram.client_proof(salted, message)}))
    final = await reader.frame()
    if not isinstance(final, dict) or final.get("ok") is not True:
        if (refusal := fatal_of(final)) is not None:
            raise refusal
        raise _refusal(final)
    signature = field(final, "signature", bytes, "server answer")
    if not scram.signature_valid(scram.server_key(salted), message, signature):
        raise AuthFailed(
            NOTAUTHORIZED, "the server's signature is wrong: it does not hold our verifier"
        )
    if reader.rest():
        raise reader.after_answer()
    peer_proof = final.get("peer_proof")
    return Proven(group, message, peer_proof if isinstance(peer_proof, bytes) else None)
