"""The credentials file: each principal's SCRAM verifier and grants, never a password.

    # MRS credentials (edit with `mrs creds`)
    decoy_key = "base64..."
    [principal."app1"]
    salt = "base64..."
    iterations = 100000
    stored_key = "base64..."
    server_key = "base64..."
    incarnation = "hex..."
    attach = ["1.10"]
    put = ["2.*"]
    confirm = ["1.10"]
    admin = ["status"]

A principal is an application name, or "group:N" for group N's link credential.
`decoy_key` (random, written by `mrs creds` the first time it saves the file) is
what every group derives an unknown name's salt and rounds from: kept in the file
they all read, so an unknown name looks the same on every group and across
restarts, as a real name does.
The file is written whole to a temporary file (0600) and renamed over the old one,
so a server reloading it (SIGHUP, or seeing it change) reads the old or the new
file, never half of one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import stat
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from mrs.config.bus import overlong_number
from mrs.errors import OperatorError
from mrs.limits import CREDENTIALS_FILE_BYTES_MAX
from mrs.security import scram
from mrs.security.files import write_private
from mrs.security.permissions import NONE, Permissions, parse_permissions

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}|group:[0-9]{1,5}")
LINK_PREFIX = "group:"
DECOY_KEY_BYTES = 32
_VERIFIER_KEYS = ("salt", "iterations", "stored_key", "server_key")
_KEYS = frozenset(_VERIFIER_KEYS + ("attach", "put", "confirm", "admin", "manage", "incarnation"))
INCARNATION_BYTES = 8
"""Random bytes of a principal's incarnation (written as hex)."""


class CredsError(OperatorError):
    """A credentials file or `mrs creds` argument that cannot be used (one line). An
    operator's mistake, so an MrsError too: an application loading its credentials
    (`ClientCredentials.from_file`) catches it with everything else of the client."""


@dataclass(frozen=True, slots=True)
class SecretFile:
    """Which kind of file a refusal is about: its name in the line (`what`) and the
    hint that fits it. Why: every refusal ended "is it the file `mrs creds` wrote?",
    also for an application's password file, which `mrs creds` never writes."""

    what: str
    hint: str


CREDENTIALS_FILE = SecretFile("credentials file", "is it the file `mrs creds` wrote?")
LINK_SECRET_FILE = SecretFile("link secret file", "is it the one `mrs creds add-group` wrote?")
PASSWORD_FILE = SecretFile("password file", "it should hold the password alone, as text")
"""An application's or operator's own file (`ClientCredentials.from_file`,
MRS_AUTH_PASSWORD_FILE, `mrs creds --password-file`)."""


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    verifier: scram.Verifier
    permissions: Permissions = NONE
    incarnation: str = ""
    """Random, made by `mrs creds add` (and add-group), kept by rotate and grant:
    which addition of the name this is. A group ends the connections that
    authenticated under another one (mrs.security.authority `revoked`). Why: `remove`
    then `add` again, the docs' way to cut off a leaked password's live sessions,
    run back to back (a script) was seen by the group as one change in which the
    principal stayed: the leaked sessions went on. Empty in a file written before."""


@dataclass(slots=True)
class Credentials:
    principals: dict[str, Principal] = field(default_factory=dict)
    decoy_key: bytes | None = None
    """Secret from which unknown names' salts and rounds are derived (see the module
    docstring); None in a file written before it existed (`decoy_secret`)."""
    text_sha256: str = ""
    """SHA-256 (hex) of the file's text as `load` read it: what a group logs as the
    copy in force, so the copies of a replicated group's machines can be compared
    (`sha256sum creds.toml`); empty for credentials not read from a file."""

    def decoy_secret(self) -> bytes:
        """The decoy key, or (an older file without one) a digest of the verifiers:
        stable across restarts and groups while the file is, and unknown outside it."""
        if self.decoy_key is not None:
            return self.decoy_key
        digest = hashlib.sha256(b"mrs-decoy-fallback")
        for name in sorted(self.principals):
            verifier = self.principals[name].verifier
            digest.update(name.encode("utf-8") + verifier.salt + verifier.stored_key)
        return digest.digest()

    def get(self, name: str) -> Principal | None:
        return self.principals.get(name)


def link_principal(group_id: int) -> str:
    return f"{LINK_PREFIX}{group_id}"


def name_problem(name: str) -> str | None:
    if NAME_PATTERN.fullmatch(name) is None:
        return (
            f"principal name {name!r}: use 1-64 of A-Z a-z 0-9 _ . - "
            "(or group:N for a group's link credential)"
        )
    return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise CredsError(f"{where}: expected a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise CredsError(f"{where}: not valid base64") from None


def load(path: Path) -> Credentials:
    """Read and check the file; CredsError (one line) on anything unusable."""
    text = ""  # what the ValueError below reads: tomllib's, after the file was read
    try:
        text = _read_text(path, CREDENTIALS_FILE)
        document = tomllib.loads(text.removeprefix("\ufeff"))  # as the bus file's: a BOM
    except FileNotFoundError:
        raise CredsError(
            f"credentials file {path} does not exist (create it with `mrs creds add`)"
        ) from None
    except OSError as error:
        raise CredsError(f"credentials file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise CredsError(f"credentials file {path}: not valid TOML: {error}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise CredsError(f"credentials file {path}: not valid TOML: nested too deep") from None
    except ValueError:  # int() of a number too long: it was an "unexpected error"
        raise CredsError(f"credentials file {path}: {': '.join(overlong_number(text))}") from None
    if not text.strip():
        # Not a file without principals (`mrs creds` writes its header and decoy_key
        # even then): an empty one is a copy begun, or a mistake, and loaded it would
        # close every application's connection.
        raise CredsError(f"credentials file {path} is empty (write it with `mrs creds add`)")
    unknown = set(document) - {"principal", "decoy_key"}
    if unknown:
        raise CredsError(f"credentials file {path}: unknown keys {sorted(unknown)}")
    table = document.get("principal", {})
    if not isinstance(table, dict):
        raise CredsError(f"credentials file {path}: [principal] must be a table")
    creds = Credentials(text_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())
    if "decoy_key" in document:
        creds.decoy_key = _unb64(document["decoy_key"], f"credentials file {path}: decoy_key")
        if len(creds.decoy_key) != DECOY_KEY_BYTES:
            raise CredsError(f"credentials file {path}: decoy_key must be {DECOY_KEY_BYTES} bytes")
    for name, raw in table.items():
        creds.principals[name] = _principal(path, name, raw)
    return creds


def _read_text(path: Path, kind: SecretFile) -> str:
    """The UTF-8 text of a credentials or secret file (of `kind`), read up to
    CREDENTIALS_FILE_BYTES_MAX from a regular file. Why: read whole with no bound,
    `--file /dev/zero` read until memory ran out; a named pipe with no writer blocked
    the client or server opening it for good, so it is opened without blocking and
    refused unless fstat says a regular file; and a file that is not UTF-8 (a binary
    file, the wrong one) was answered in Python's codec words (`'utf-8' codec can't
    decode byte 0xbc in position 2`), quoting a byte of what may be a secret. OSError
    passes through."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    with open(os.open(path, flags), "rb") as file:
        if (odd := _not_regular(os.fstat(file.fileno()).st_mode)) is not None:
            raise CredsError(
                f"{kind.what} {path} is {odd}: only a regular file is read (a pipe or a "
                "device may block or never end)"
            )
        data = file.read(CREDENTIALS_FILE_BYTES_MAX + 1)
    if len(data) > CREDENTIALS_FILE_BYTES_MAX:
        raise CredsError(
            f"{kind.what} {path} is larger than {CREDENTIALS_FILE_BYTES_MAX >> 20} MiB: {kind.hint}"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredsError(f"{kind.what} {path} is not UTF-8 text: {kind.hint}") from None


def _not_regular(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file, in words; else None."""
    if stat.S_ISREG(mode):
        return None
    for test, words in (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "no regular file"


def _principal(path: Path, name: str, raw: object) -> Principal:
    where = f"credentials file {path}: principal {name!r}"
    if (problem := name_problem(name)) is not None:
        raise CredsError(f"credentials file {path}: {problem}")
    if not isinstance(raw, dict):
        raise CredsError(f"{where} must be a table")
    unknown = set(raw) - _KEYS
    missing = [key for key in _VERIFIER_KEYS if key not in raw]
    if unknown or missing:
        raise CredsError(f"{where}: unknown keys {sorted(unknown)}, missing {missing}")
    iterations = raw["iterations"]
    if (
        not isinstance(iterations, int)
        or not scram.ITERATIONS_MIN <= iterations <= scram.ITERATIONS_MAX
    ):
        raise CredsError(
            f"{where}: iterations must be {scram.ITERATIONS_MIN}..{scram.ITERATIONS_MAX}"
        )
    verifier = scram.Verifier(
        _unb64(raw["salt"], f"{where}.salt"),
        iterations,
        _unb64(raw["stored_key"], f"{where}.stored_key"),
        _unb64(raw["server_key"], f"{where}.server_key"),
    )
    if len(verifier.stored_key) != scram.KEY_BYTES or len(verifier.server_key) != scram.KEY_BYTES:
        raise CredsError(f"{where}: stored_key and server_key must be {scram.KEY_BYTES} bytes")
    perms = parse_permissions(raw)
    if isinstance(perms, str):
        raise CredsError(f"{where}: {perms}")
    incarnation = raw.get("incarnation", "")
    if not isinstance(incarnation, str) or not re.fullmatch(r"[0-9a-f]{0,64}", incarnation):
        raise CredsError(f"{where}: incarnation must be hex text (written by `mrs creds add`)")
    return Principal(name, verifier, perms, incarnation)


def render(creds: Credentials) -> str:
    lines = [
        "# MRS credentials: salted SCRAM-SHA-256 verifiers (PBKDF2-HMAC-SHA256) and grants.",
        "# No passwords are stored here. Edit with `mrs creds add/rotate/remove/grant`.",
    ]
    if creds.decoy_key is not None:
        lines += ["", f"decoy_key = {json.dumps(_b64(creds.decoy_key))}"]
    for name in sorted(creds.principals):
        principal = creds.principals[name]
        verifier = principal.verifier
        lines += [
            "",
            f"[principal.{json.dumps(name)}]",
            f"salt = {json.dumps(_b64(verifier.salt))}",
            f"iterations = {verifier.iterations}",
            f"stored_key = {json.dumps(_b64(verifier.stored_key))}",
            f"server_key = {json.dumps(_b64(verifier.server_key))}",
        ]
        if principal.incarnation:
            lines.append(f"incarnation = {json.dumps(principal.incarnation)}")
        for kind, values in principal.permissions.as_dict().items():
            lines.append(f"{kind} = {json.dumps(values)}")
    return "\n".join(lines) + "\n"


def save(path: Path, creds: Credentials) -> None:
    """Write atomically, owner-only (0600) whatever the umask."""
    if creds.decoy_key is None:
        creds.decoy_key = os.urandom(DECOY_KEY_BYTES)
    write_private(Path(path), render(creds).encode("utf-8"))


def load_or_empty(path: Path) -> Credentials:
    """The file's credentials; none when it does not exist or is empty (`mrs creds
    add` starts it)."""
    path = Path(path)
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return Credentials()
    return load(path)


def generate_password() -> str:
    """A random secret for a link credential (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def add(
    creds: Credentials,
    name: str,
    password: str,
    permissions: Permissions,
    iterations: int = scram.ITERATIONS_DEFAULT,
) -> None:
    if (problem := name_problem(name)) is not None:
        raise CredsError(problem)
    if name in creds.principals:
        raise CredsError(f"principal {name!r} exists: use `mrs creds rotate` or `grant`")
    verifier = scram.make_verifier(password, iterations)
    incarnation = secrets.token_hex(INCARNATION_BYTES)
    creds.principals[name] = Principal(name, verifier, permissions, incarnation)


def rotate(
    creds: Credentials, name: str, password: str, iterations: int = scram.ITERATIONS_DEFAULT
) -> None:
    """A new password (new salt) for an existing principal; its grants stay."""
    principal = _existing(creds, name)
    creds.principals[name] = replace(principal, verifier=scram.make_verifier(password, iterations))


def grant(creds: Credentials, name: str, permissions: Permissions) -> None:
    """Replace a principal's grants (its password stays). A group's link credential
    (`group:N`) takes none: a link is no application, and rights granted to it let
    whoever holds a group's link secret attach, get and confirm as an application."""
    principal = _existing(creds, name)
    if name.startswith(LINK_PREFIX):
        raise CredsError(
            f"{name} is a group's link credential: it takes no grants (a link puts and "
            "confirms as its group, not as an application); grant an application principal"
        )
    creds.principals[name] = replace(principal, permissions=permissions)


def remove(creds: Credentials, name: str) -> None:
    _existing(creds, name)
    del creds.principals[name]


def _existing(creds: Credentials, name: str) -> Principal:
    principal = creds.principals.get(name)
    if principal is None:
        raise CredsError(f"no principal {name!r} in the credentials file")
    return principal


def read_secret(path: Path, kind: SecretFile) -> str:
    """A password kept in a file: a group's link secret (LINK_SECRET_FILE) or an
    application's or tool's password (PASSWORD_FILE); `kind` names it in a refusal."""
    try:
        # Not the decoder's text: it quotes bytes of the file, which is a secret.
        # Before, a binary file (a half copy, the wrong file) escaped as
        # UnicodeDecodeError: a running group reloading its link secret stopped.
        text = _read_text(path, kind)
    except OSError as error:
        raise CredsError(f"{kind.what} {path}: {error.strerror or error}") from None
    return secret_text(text, f"{kind.what} {path}", kind.hint)


def secret_text(text: str, where: str, hint: str = PASSWORD_FILE.hint) -> str:
    """The password `text` holds (a file's or stdin's): stripped of surrounding
    whitespace, and one line. Why one line: a file of two (a name above the password,
    a comment, two passwords) was taken whole, newline inside, by
    `ClientCredentials.from_file` and `mrs creds --password-file`, while
    `--password-stdin` took its first line: the password registered one way never
    logged in the other, and the group said only NOTAUTHORIZED. Refused in one
    line that quotes none of it (`where` names the file or stdin)."""
    text = text.strip()
    if not text:
        raise CredsError(f"{where} is empty")
    if "\n" in text or "\r" in text:
        lines = len(text.splitlines())
        raise CredsError(f"{where} holds {lines} lines, not one password: {hint}")
    return text


def file_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777
