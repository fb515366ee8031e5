"""The `[group.tls]` table: parsed, its files checked to load, and the SSL contexts it makes.

Every file is read and checked when the config loads, so a bad path or a key that
does not match its certificate is a one-line config error, not a failure on the
first connection. Group certificates name `mrs-group-N` (`group_server_name`).
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrs.limits import CERT_EXPIRY_WARN_S

TLS_KEYS = frozenset({"ca", "cert", "key", "client_cert"})
CLIENT_CERT_CHOICES = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
GROUP_NAME_PREFIX = "mrs-group-"
"""Certificate name (DNS subjectAltName) that proves a certificate is group N's."""

log = logging.getLogger("mrs.tls")

FileStamps = tuple[tuple[int, int, int] | None, ...]
"""(mtime_ns, size, inode) of the CA, certificate and key files (None: unreadable)."""


def strict_eof(context: ssl.SSLContext) -> ssl.SSLContext:
    """`context` with an end of stream without TLS's close_notify reported as an error.

    Why: CPython 3.11.0-3.11.3 (Debian's 3.11.2 among them) set OpenSSL's
    OP_IGNORE_UNEXPECTED_EOF on every context, so a cut stream read as a clean end.
    A refused client certificate then looked like "server closed the connection" (a
    drop the client retries for ever) instead of a TLS failure (TlsRefused), and a
    truncated stream could pass for a finished one. Later versions leave it off."""
    context.options &= ~getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
    return context


def group_server_name(group_id: int) -> str:
    """The name a link verifies in the certificate of group `group_id`."""
    return f"{GROUP_NAME_PREFIX}{group_id}"


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """One group's `[group.tls]`: absolute paths, already checked to load."""

    ca: Path
    cert: Path
    key: Path
    client_cert: str = "none"
    _contexts: dict[str, tuple[FileStamps, ssl.SSLContext]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )
    """Contexts built, by kind, with the stamps of the files they were built from."""
    _said: dict[str, FileStamps] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )
    """The file stamps last logged about (one line per change, not per kind)."""

    def server_context(self) -> ssl.SSLContext:
        """For accepting: our certificate; client certificates checked as configured."""
        return self._accepting("server", CLIENT_CERT_CHOICES[self.client_cert])

    def mutual_server_context(self) -> ssl.SSLContext:
        """For accepting peers that must show a certificate of the CA whatever
        `client_cert` says for clients: the instances of a replicated group
        (mrs.security.replication_tls)."""
        return self._accepting("mutual", ssl.CERT_REQUIRED)

    def _accepting(self, kind: str, verify_mode: ssl.VerifyMode) -> ssl.SSLContext:
        def build() -> ssl.SSLContext:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca))
            context.load_cert_chain(str(self.cert), str(self.key), password=_no_passphrase)
            context.verify_mode = verify_mode
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            return context

        return self._current(kind, build)

    def _stamps(self) -> FileStamps:
        stamps: list[tuple[int, int, int] | None] = []
        for path in (self.ca, self.cert, self.key):
            try:
                st = os.stat(path)
            except OSError:
                stamps.append(None)
                continue
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamps)

    def _current(self, kind: str, build: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """The `kind` context built from the files as they are now: built again when
        the CA, certificate or key file changed since (three stats a handshake).

        Why: a context built once was kept for the process's life. A replica that
        became active served the certificate it had loaded at start (or at an earlier
        term) after its files were replaced on disk, so clients that pin the new CA
        were refused, and an expired certificate renewed on disk was still served
        (found by a probe: `mrs certs --force` on a replicated group, then a
        failover). Files that do not load (a copy half done, a key of another
        certificate) leave the context in force, said once per change."""
        stamps = self._stamps()
        held = self._contexts.get(kind)
        if held is not None and held[0] == stamps:
            return held[1]
        try:
            context = strict_eof(build())
        except (OSError, ssl.SSLError, ValueError) as error:
            if held is None:
                raise
            self._contexts[kind] = (stamps, held[1])
            self._say(
                stamps, logging.ERROR, f"do not load ({_reason(error)}): the ones in force stay"
            )
            return held[1]
        self._contexts[kind] = (stamps, context)
        if held is not None:
            problem = self.validity_problem()
            level = logging.WARNING if problem else logging.INFO
            self._say(stamps, level, problem or "changed: new connections use them")
        return context

    def _say(self, stamps: FileStamps, level: int, what: str) -> None:
        """One line per change of the files, whichever context noticed it first."""
        if self._said.get("files") == stamps:
            return
        self._said["files"] = stamps
        log.log(level, "[group.tls] files %s, %s, %s: %s", self.cert, self.key, self.ca, what)

    def validity_problem(self, now: datetime.datetime | None = None) -> str | None:
        """Why this group's certificate or CA cannot be used today (None: neither has
        expired). Asked when `mrs serve` starts, not when the config loads: `mrs dump`
        and the other offline tools must still read a config whose certificate has
        expired."""
        from cryptography import x509  # not at import: a group without TLS never loads it

        now = now or datetime.datetime.now(datetime.UTC)
        for what, path in (("certificate", self.cert), ("CA certificate", self.ca)):
            try:
                cert = x509.load_pem_x509_certificate(path.read_bytes())
            except (OSError, ValueError):
                continue  # checked to load when the config was read
            # Not "not valid yet": a clock behind the CA's would refuse a certificate
            # that every peer with the right time accepts.
            if now > cert.not_valid_after_utc:
                return (
                    f"the {what} {path} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} "
                    "UTC: every TLS handshake would fail; make new certificates "
                    "(`mrs certs --force`, docs/security.md)"
                )
        return None

    def expiry_notice(self, now: datetime.datetime | None = None) -> tuple[int, str] | None:
        """(log level, line) when this group's certificate or CA expires within
        CERT_EXPIRY_WARN_S or is not valid yet (WARNING) or has expired (ERROR), else
        None. Why: a certificate that expired while the group ran made every new
        handshake fail with INFO lines only, and nothing said so before the day came."""
        from cryptography import x509  # not at import: a group without TLS never loads it

        now = now or datetime.datetime.now(datetime.UTC)
        soon = now + datetime.timedelta(seconds=CERT_EXPIRY_WARN_S)
        for what, path in (("certificate", self.cert), ("CA certificate", self.ca)):
            try:
                cert = x509.load_pem_x509_certificate(path.read_bytes())
            except (OSError, ValueError):
                continue  # a file being replaced: the next look reads it
            ends, begins = cert.not_valid_after_utc, cert.not_valid_before_utc
            if now < begins:
                # Served all the same (a clock behind the CA's must not stop a group),
                # but said: every peer with the right time refused it, and the group's
                # only lines were INFO ones blaming the peer ("the peer refused our
                # certificate"), one per link retry.
                return logging.WARNING, (
                    f"the {what} {path} is not valid until {begins:%Y-%m-%d %H:%M} UTC "
                    f"(this machine's clock says {now:%Y-%m-%d %H:%M} UTC): clients and "
                    "peers refuse it until then; check this machine's clock or the "
                    "certificate's dates"
                )
            when = f"{ends:%Y-%m-%d %H:%M} UTC"
            fix = "make new certificates (`mrs certs`, docs/security.md)"
            if now > ends:
                return logging.ERROR, (
                    f"the {what} {path} expired on {when}: every new TLS handshake "
                    f"fails; {fix}"
                )
            if soon > ends:
                left_h = (ends - now).total_seconds() / 3600
                left = f"{left_h / 24:.0f} days" if left_h >= 36 else f"{left_h:.0f} hours"
                return logging.WARNING, (
                    f"the {what} {path} expires on {when} (in {left}): {fix}"
                )
        return None

    def start_problem(self, group: Any) -> str | None:
        """Why `group`'s server must not start with this [group.tls] (None: it may):
        an expired certificate or CA (`validity_problem`), or a certificate that does
        not name `mrs-group-N` while other groups (links) or its own instances
        (replication) verify that name: every one of them would refuse it, and the
        refusal was logged on their side, far from the file to fix."""
        from cryptography import x509  # not at import: a group without TLS never loads it

        if (problem := self.validity_problem()) is not None:
            return problem
        if not group.linked_group_ids and not group.instances:
            return None
        wanted = group_server_name(group.id)
        try:
            cert = x509.load_pem_x509_certificate(self.cert.read_bytes())
            names = cert.extensions.get_extension_for_class(
                x509.SubjectAlternativeName
            ).value.get_values_for_type(x509.DNSName)
        except x509.ExtensionNotFound:
            names = []
        except (OSError, ValueError):
            return None  # checked to load when the config was read
        if wanted in names:
            return None
        who = "its linked groups" if group.linked_group_ids else "its other instances"
        return (
            f"the certificate {self.cert} does not name {wanted} (its DNS names: "
            f"{', '.join(names) or 'none'}): {who} verify that name and would refuse it; "
            "use this group's certificate (`mrs certs`, docs/security.md)"
        )

    def dial_context(self) -> ssl.SSLContext:
        """For dialing a linked group: verify it (name and CA), show our certificate."""

        def build() -> ssl.SSLContext:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca))
            context.load_cert_chain(str(self.cert), str(self.key), password=_no_passphrase)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            return context

        return self._current("dial", build)


def parse_tls(parser: Any, group: dict[str, Any], group_where: str) -> TlsConfig | None:
    """Validate `[group.tls]` with the config parser's helpers (one-line errors)."""
    if "tls" not in group:
        return None
    where = f"{group_where}.tls"
    raw = group["tls"]
    if not isinstance(raw, dict):
        from mrs.config.fields import _describe  # fields imports the schema, which imports us

        parser.fail(where, f"must be a table ([group.tls]), got {_describe(raw)}")
    parser.check_keys(raw, where, TLS_KEYS, ("ca", "cert", "key"))
    client_cert = raw.get("client_cert", "none")
    if not isinstance(client_cert, str) or client_cert not in CLIENT_CERT_CHOICES:
        choices = ", ".join(repr(choice) for choice in CLIENT_CERT_CHOICES)
        parser.fail(f"{where}.client_cert", f"must be one of {choices}, got {client_cert!r}")
    paths = {key: _path(parser, raw, key, where) for key in ("ca", "cert", "key")}
    config = TlsConfig(paths["ca"], paths["cert"], paths["key"], client_cert)
    _check_loads(parser, config, where)
    return config


def _path(parser: Any, raw: dict[str, Any], key: str, where: str) -> Path:
    text = parser.string(raw, key, where)
    if not text.strip() or "\0" in text:
        parser.fail(f"{where}.{key}", f"must be a file path, got {text!r}")
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~nosuchuser/..."
        parser.fail(f"{where}.{key}", f"cannot expand the home directory in {text!r}")
    if not path.is_absolute():
        path = parser.base_directory / path
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        parser.fail(f"{where}.{key}", f"no such file: {path}")
    except OSError as error:  # a directory, no permission, a name too long, ...
        parser.fail(f"{where}.{key}", f"cannot read {path}: {error.strerror or error}")
    return path


class EncryptedKey(ValueError):
    """A private key that asked for a passphrase (`_no_passphrase`)."""


def _no_passphrase() -> bytes:
    """OpenSSL's password callback, called only for an encrypted key. Without it,
    OpenSSL prompted `Enter PEM pass phrase:` on the terminal whenever a context was
    built (the config's load, then each context), and with no terminal every tool
    stopped with `mrs: Invalid argument`, naming no file. A ValueError: a key swapped
    for an encrypted one while the group runs is not loaded, as any bad file."""
    raise EncryptedKey(
        "the key is encrypted (it has a passphrase), which a group cannot ask for: "
        "give it an unencrypted key, owner-only (openssl pkey -in KEY -out NEW; chmod 600 NEW)"
    )


def _check_loads(parser: Any, config: TlsConfig, where: str) -> None:
    """Load the files now: a PEM that is not one, or a key of another certificate,
    fails the config load instead of the first handshake."""
    try:
        ssl.create_default_context(cafile=str(config.ca))
    except (ssl.SSLError, ValueError) as error:
        parser.fail(f"{where}.ca", f"{config.ca} is not a PEM CA certificate: {_reason(error)}")
    try:
        ssl.create_default_context().load_cert_chain(
            str(config.cert), str(config.key), password=_no_passphrase
        )
    except EncryptedKey as error:
        parser.fail(f"{where}.key", f"{config.key}: {error}")
    except (ssl.SSLError, ValueError) as error:
        parser.fail(
            f"{where}.cert",
            f"{config.cert} with key {config.key} does not load "
            f"(not PEM, or the key is not this certificate's): {_reason(error)}",
        )


def check_link_tls(parser: Any, groups: dict[int, Any], link_where: str, pair: tuple) -> None:
    """A link is TLS on both ends or on neither: a dialer without TLS could not reach
    a TLS port, and one with TLS would be refused by a plaintext one."""
    low, high = (groups[group_id] for group_id in pair)
    if (low.tls is None) != (high.tls is None):
        with_tls, without = (low, high) if low.tls is not None else (high, low)
        parser.fail(
            f"{link_where}.groups",
            f"group {with_tls.id} has [group.tls] and group {without.id} has not; "
            "a link needs TLS on both groups or on neither",
        )


NOT_TLS_REASON = "WRONG_VERSION_NUMBER"
"""OpenSSL's reason when what the peer sent is no TLS record (e.g. a plaintext port)."""
NOT_TLS = "the peer does not speak TLS (OpenSSL: wrong version number)"
PLAINTEXT_REFUSAL = (
    "this group speaks TLS only: connect with tls=clients.tls_context(ca, cert, key)"
    " (docs/security.md)"
)
"""The Fatal a group with [group.tls] answers a client that spoke plaintext to it
(mrs.security.tls_network), read by the client's authentication as that refusal."""


PEER_ALERTS = {
    "TLSV1_ALERT_UNKNOWN_CA": "the peer does not trust the CA of our certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer says our certificate has expired",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the peer requires a client certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
}
"""What the other side's TLS alert means for us, said before OpenSSL's own words."""


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason == NOT_TLS_REASON:
        return NOT_TLS
    if isinstance(error, ssl.SSLError) and error.reason:
        words = str(error.reason).lower().replace("_", " ")
        meaning = PEER_ALERTS.get(str(error.reason))
        return f"{meaning} ({words})" if meaning else words
    return str(error) or type(error).__name__


def ssl_failure(error: BaseException) -> str | None:
    """One line for the SSL error behind `error` (trio's BrokenResourceError keeps it
    as its cause), or None when there is none (a refused or reset TCP connection)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError):
            return _reason(cause)
        cause = cause.__cause__ or cause.__context__
    return None


def describe_tls_error(error: BaseException) -> str:
    """One line for a failed handshake: the SSL reason behind trio's BrokenResourceError."""
    return ssl_failure(error) or str(error) or type(error).__name__


def operator_connect_options(group: Any) -> dict[str, Any]:
    """`connect()` options for an operator tool reaching `group` from the config: TLS
    with the group's CA and, as client certificate, the group's own (the tool runs
    where the group's files are); the server verified by its name mrs-group-N."""
    if group.tls is None:
        return {}
    return {"tls": group.tls.dial_context(), "tls_server_name": group_server_name(group.id)}
