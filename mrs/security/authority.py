"""A group's side of authentication: who may connect, as whom, with which grants.

Holds the credentials file's verifiers and grants and this group's own link secret;
reloads both when the file changes (checked at every new connection) or on SIGHUP,
so `mrs creds rotate/remove/grant` take effect without a restart. A file that fails
to load keeps the previous credentials in force (logged), so a typo cannot lock
everyone out or let everyone in.

Runs the server half of the exchange in mrs.security.handshake for each new
connection (`accept`), and the dialing half for this group's outgoing links
(`dial_link`), where it also checks the peer group's proof of *its* link secret.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic

import trio

from mrs.config.auth import AuthConfig
from mrs.config.schema import BusConfig
from mrs.core.refusals import clipped
from mrs.limits import CREDENTIALS_CHECK_INTERVAL_S
from mrs.model import Status
from mrs.security import scram
from mrs.security.creds import (
    LINK_PREFIX,
    LINK_SECRET_FILE,
    Credentials,
    CredsError,
    link_principal,
    load,
    read_secret,
)
from mrs.security.files import owner_only
from mrs.security.handshake import (
    AUTH_VERSION,
    LINK_PROOF_SUFFIX,
    AuthFailed,
    ClientCredentials,
    FrameReader,
    auth_message,
    authenticate,
    encode,
    field,
)
from mrs.security.permissions import NONE, Permissions, load_warnings

log = logging.getLogger("mrs.security")


@dataclass(frozen=True, slots=True)
class _Stamp:
    mtime_ns: int
    size: int
    inode: int


def _stamp(path) -> _Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Stamp(st.st_mtime_ns, st.st_size, st.st_ino)


ROTATE_IT = "rotate it (docs/security-auth.md)"
GRANT_WARNINGS_MAX = 20
"""Lines of grant warnings a load logs (`Authority.warn_of_grants`); then a count."""


class Authority:
    """Credentials in force for one group (built only when [auth] is configured)."""

    def __init__(
        self,
        config: AuthConfig,
        group_id: int,
        linked_group_ids: tuple[int, ...],
        bus: BusConfig | None = None,
    ):
        self.config = config
        self.group_id = group_id
        self.bus = bus
        """The bus the grants name queues of: each load warns of a grant that names
        what it does not have (`warn_of_grants`); None: not checked."""
        self.linked_group_ids = linked_group_ids
        self.reloads = 0
        self.listeners: list[Callable[[], None]] = []
        """Called after each successful reload: the server ends what a revocation
        took away (mrs.server.connections)."""
        self.creds, self._link_salted, self._link_password = self._load()  # CredsError: no start
        self._stamps = self._current_stamps()
        self._decoy_basis: tuple[Credentials, bytes, tuple[int, ...]] | None = None
        """The credentials `decoy` last worked from, their decoy key and sorted rounds."""
        self._changing: tuple[tuple[_Stamp | None, _Stamp | None], float] | None = None
        """Stamps of files seen changed in place, and when first seen so (`_settled`)."""
        log.info("credentials in force: %s", self.in_force())
        self.warn_of_grants()

    def in_force(self) -> str:
        """Which copy of the credentials file is in force: its path, its principals
        and the SHA-256 of its text. Why: each machine of a replicated group has its
        own copy, and the instance that becomes active enforces its own (brought up
        to the group's last `mrs admin grant`, or kept when edited there); said at
        start and at each reload, so an operator can tell which copy a group
        enforces and compare it with the other machines' (`sha256sum`)."""
        return (
            f"{len(self.creds.principals)} principals from {self.config.credentials_path} "
            f"(sha256 {self.creds.text_sha256[:16]})"
        )

    # -- loading --------------------------------------------------------------------

    def _current_stamps(self) -> tuple[_Stamp | None, _Stamp | None]:
        return (
            _stamp(self.config.credentials_path),
            _stamp(self.config.link_secret_path(self.group_id)),
        )

    def _load(self) -> tuple[Credentials, bytes | None, str | None]:
        creds = load(self.config.credentials_path)
        owner_only(self.config.credentials_path, "credentials file", log, ROTATE_IT)
        if not self.linked_group_ids:
            return creds, None, None
        own = creds.get(link_principal(self.group_id))
        if own is None:
            raise CredsError(
                f"group {self.group_id} has links but the credentials file "
                f"{self.config.credentials_path} has no principal "
                f"{link_principal(self.group_id)!r} (mrs creds add-group)"
            )
        password = read_secret(self.config.link_secret_path(self.group_id), LINK_SECRET_FILE)
        owner_only(self.config.link_secret_path(self.group_id), "link secret", log, ROTATE_IT)
        salted = scram.salted_password(password, own.verifier.salt, own.verifier.iterations)
        if not scram.proof_valid(
            own.verifier, b"self-check", scram.client_proof(salted, b"self-check")
        ):
            raise CredsError(
                f"link secret {self.config.link_secret_path(self.group_id)} does not match "
                f"principal {link_principal(self.group_id)!r} in the credentials file"
            )
        return creds, salted, password

    def reload(self, why: str) -> bool:
        """Load the files again; on any problem keep the credentials in force."""
        self._stamps = self._current_stamps()
        try:
            self.creds, self._link_salted, self._link_password = self._load()
        except CredsError as error:
            log.error(
                "credentials not reloaded (%s): %s; the previous ones stay in force", why, error
            )
            return False
        self.reloads += 1
        log.info("credentials reloaded (%s): %s", why, self.in_force())
        self.warn_of_grants()
        for listener in self.listeners:
            listener()
        return True

    def reload_if_changed(self) -> None:
        stamps = self._current_stamps()
        if stamps == self._stamps:
            self._changing = None
        elif self._settled(stamps):
            self.reload("file changed")

    def _settled(self, stamps: tuple[_Stamp | None, _Stamp | None]) -> bool:
        """Whether changed files can be read now. At once when each was replaced
        whole (another inode: `mrs creds` renames a complete file over the old one)
        or removed; a file changed in place (an editor, `cp`, `scp`) once it has
        stayed the same for CREDENTIALS_CHECK_INTERVAL_S. Why: such a copy truncates
        the file first, and a group that read it then (empty, or cut between two
        principals) loaded a valid file without those principals and closed every
        connection of theirs for good (the client library does not reconnect after
        NOTAUTHORIZED)."""
        in_place = any(
            new is not None and old is not None and new.inode == old.inode and new != old
            for new, old in zip(stamps, self._stamps, strict=True)
        )
        if not in_place:
            return True
        now = monotonic()
        if self._changing is None or self._changing[0] != stamps:
            self._changing = (stamps, now)
            return False
        return now - self._changing[1] >= CREDENTIALS_CHECK_INTERVAL_S

    def warn_of_grants(self) -> None:
        """A WARNING per grant in force that names what the bus does not have, or
        whose meaning narrowed (mrs.security.permissions `load_warnings`), at most
        GRANT_WARNINGS_MAX lines a load. Never a refusal: a file an earlier release
        accepted must not keep a group from starting."""
        if self.bus is None:
            return
        lines = [
            f"credentials: principal {name!r}: {warning}"
            for name, principal in sorted(self.creds.principals.items())
            for warning in load_warnings(principal.permissions, self.bus, self.group_id)
        ]
        for line in lines[:GRANT_WARNINGS_MAX]:
            log.warning("%s", line)
        if len(lines) > GRANT_WARNINGS_MAX:
            log.warning(
                "credentials: %d more warnings of grants (`mrs creds list` shows them)",
                len(lines) - GRANT_WARNINGS_MAX,
            )

    def decoy(self, name: str) -> scram.Verifier:
        """What an unknown name is answered: derived from the credentials file alone
        (its decoy key and the rounds its principals use), so the same on every group
        and across restarts. The file's part is worked out once per load
        (`_decoy_basis`); the rest costs the same for any name. Why: worked out per
        name, an unknown name's challenge came later than a known one's by time
        growing with the principals (more in a file without `decoy_key`, whose
        fallback hashes every verifier; figures in benchmarks/README.md): a clock
        told which names exist, which the decoy is there to hide."""
        basis = self._decoy_basis
        if basis is None or basis[0] is not self.creds:
            creds = self.creds
            rounds = tuple(sorted(p.verifier.iterations for p in creds.principals.values()))
            basis = self._decoy_basis = (creds, creds.decoy_secret(), rounds)
        return scram.decoy_verifier(basis[1], name, basis[2])

    def revoked(self, name: str, incarnation: str) -> str | None:
        """Why a connection that authenticated as `name` under `incarnation` (the
        principal's then, `accept`) must end now: the principal is gone, or was
        removed and added again since (another incarnation: the docs' way to cut off
        a leaked password's live sessions, done back to back, reaches the group as
        one change in which the name stays). None: it goes on (a rotation keeps it)."""
        principal = self.creds.get(name)
        if principal is None:
            return f"principal {name!r} was removed from the credentials"
        if principal.incarnation != incarnation:
            return (
                f"principal {name!r} was removed and added again since this connection "
                "authenticated: connect again with its new password"
            )
        return None

    def permissions(self, name: str | None) -> Permissions:
        """Grants of a principal as of now (a removed principal has none)."""
        principal = self.creds.get(name) if name is not None else None
        return principal.permissions if principal is not None else NONE

    # -- accepting ------------------------------------------------------------------

    async def accept(self, stream: trio.abc.Stream) -> tuple[str, str, bytes]:
        """Server half of the exchange: (principal name, the incarnation it proved,
        bytes read past it), or AuthFailed. The caller bounds the time and answers
        the failure. The incarnation is the one checked here: the file may reload
        while the answer is sent."""
        self.reload_if_changed()
        reader = FrameReader(stream)
        first = await reader.frame()
        if isinstance(first, list):
            raise AuthFailed(
                Status.NOTAUTHORIZED,
                f"group {self.group_id} requires authentication: connect with credentials",
                protocol_answer=True,
            )
        if not isinstance(first, dict) or first.get("auth") != AUTH_VERSION:
            raise AuthFailed(Status.PROTOCOL_ERROR, f"expected auth version {AUTH_VERSION}")
        name = field(first, "name", str, "client hello")
        client_nonce = field(first, "nonce", bytes, "client hello")
        principal = self.creds.get(name)
        decoy = self.decoy(name)  # for a known name too: the same steps for every name
        verifier = principal.verifier if principal is not None else decoy
        server_nonce = scram.nonce()
        challenge = {
            "auth": AUTH_VERSION,
            "salt": verifier.salt,
            "iterations": verifier.iterations,
            "nonce": server_nonce,
            "group": self.group_id,
        }
        await stream.send_all(encode(challenge))
        proof = field(await reader.frame(), "proof", bytes, "client proof")
        message = auth_message(
            name, client_nonce, server_nonce, verifier.salt, verifier.iterations, self.group_id
        )
        valid = scram.proof_valid(verifier, message, proof)  # for an unknown name too
        if principal is None or not valid:
            # the name is the peer's (up to a frame, ~4 KB): clipped in the log and answer
            raise AuthFailed(Status.NOTAUTHORIZED, f"authentication failed for {clipped(name)!r}")
        answer = {"ok": True, "signature": scram.server_signature(verifier.server_key, message)}
        if name.startswith(LINK_PREFIX) and self._link_salted is not None:
            answer["peer_proof"] = scram.client_proof(
                self._link_salted, message + LINK_PROOF_SUFFIX
            )
        await stream.send_all(encode(answer))
        return name, principal.incarnation, reader.rest()

    async def refuse(self, stream: trio.abc.Stream, failure: AuthFailed) -> None:
        """Answer a failed exchange in the form its client reads (best effort)."""
        frame = encode({"ok": False, "status": int(failure.status), "message": failure.message})
        await stream.send_all(frame)

    # -- dialing --------------------------------------------------------------------

    async def dial_link(self, stream: trio.abc.Stream, peer_id: int) -> None:
        """Authenticate as this group to peer_id and check that the peer proves it is
        peer_id; AuthFailed otherwise (the dialer retries with backoff)."""
        self.reload_if_changed()
        if self._link_password is None:
            raise AuthFailed(Status.NOTAUTHORIZED, f"group {self.group_id} has no link secret")
        peer = self.creds.get(link_principal(peer_id))
        if peer is None:
            raise AuthFailed(
                Status.NOTAUTHORIZED, f"no principal {link_principal(peer_id)!r} to check the peer"
            )
        credentials = ClientCredentials(link_principal(self.group_id), self._link_password)
        proven = await authenticate(stream, credentials)
        if proven.group != peer_id:
            raise AuthFailed(
                Status.NOTAUTHORIZED, f"expected group {peer_id}, the peer says {proven.group}"
            )
        if proven.peer_proof is None or not scram.proof_valid(
            peer.verifier, proven.auth_message + LINK_PROOF_SUFFIX, proven.peer_proof
        ):
            raise AuthFailed(
                Status.NOTAUTHORIZED,
                f"the peer at this address cannot prove it is group {peer_id}",
            )
