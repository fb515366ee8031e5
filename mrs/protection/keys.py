"""Application identities: a signing and an encryption key per application, on disk.

Each application (and each group that protects what it puts on its DLQ) owns one
identity: an Ed25519 key that signs and an X25519 key that messages are encrypted
to. The private half lives in `NAME.key`, readable by its owner only (0600 in a 0700
directory, whatever the umask); the public half in `NAME.pub`, which is copied to
everyone's public-key directory. The server never needs an application's private
key: that is what keeps a protected body unreadable to the group and its tools.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from mrs.protection.errors import PolicyError

PRIVATE_KIND = "mrs-identity-v1"
PUBLIC_KIND = "mrs-public-key-v1"
PREVIOUS_KEYS_MAX = 16
"""Decryption keys of earlier rotations an identity keeps (each tried in turn on a
message its newest key does not open)."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
"""An identity name: also a file name, so no separators and no leading dot."""


@dataclass(frozen=True)
class PublicKeys:
    """What others need to verify an application's signature and encrypt to it."""

    name: str
    verify_key: Ed25519PublicKey
    encrypt_key: X25519PublicKey


@dataclass(frozen=True)
class Identity:
    """An application's private keys (and its name, the signer name on its messages)."""

    name: str
    signing_key: Ed25519PrivateKey
    decrypt_key: X25519PrivateKey
    previous_decrypt_keys: tuple[X25519PrivateKey, ...] = ()
    """Decryption keys of before its rotations (`rotated`), newest first: what was
    sealed for them still opens."""

    @classmethod
    def generate(cls, name: str) -> Identity:
        check_name(name)
        return cls(name, Ed25519PrivateKey.generate(), X25519PrivateKey.generate())

    def rotated(self) -> Identity:
        """New signing and encryption keys under the same name, the decryption keys
        of before kept (PREVIOUS_KEYS_MAX at most). Why: messages sealed for the old
        key wait on queues (and arrive from senders that have not yet read the new
        NAME.pub); a reader that could open only its newest key refused each to the
        DLQ, and the key that could open them was gone."""
        kept = (self.decrypt_key, *self.previous_decrypt_keys)[:PREVIOUS_KEYS_MAX]
        return Identity(self.name, Ed25519PrivateKey.generate(), X25519PrivateKey.generate(), kept)

    @property
    def public(self) -> PublicKeys:
        return PublicKeys(self.name, self.signing_key.public_key(), self.decrypt_key.public_key())


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise PolicyError(
            f"identity name must be 1-64 of A-Z a-z 0-9 _ . - (not starting with . or -), "
            f"got {name!r}"
        )
    return name


def write_identity(identity: Identity, out_dir: Path) -> tuple[Path, Path]:
    """Write NAME.key (0600) and NAME.pub (0644) into `out_dir` (made 0700 if new).
    Refuses to overwrite an existing key: a lost private key cannot be recovered.
    `out_dir`'s parent must exist (FileNotFoundError), as `mrs creds` refuses a
    credentials file in a missing directory. Why: `--out /etc/mrs/keys` with a typo in
    /etc/mrs made the whole mistyped tree and put the private key where no one looks."""
    out_dir.mkdir(mode=0o700, exist_ok=True)
    private_path = out_dir / f"{identity.name}.key"
    public_path = out_dir / f"{identity.name}.pub"
    for path in (private_path, public_path):
        if path.exists():
            raise PolicyError(f"{path} exists: remove it first to make a new key")
    _write_new(private_path, _private_document(identity), 0o600)
    _write_new(public_path, _public_document(identity.public), 0o644)
    return private_path, public_path


def rotate_identity(name: str, out_dir: Path) -> tuple[Path, Path]:
    """Replace NAME.key in `out_dir` by `Identity.rotated` of it (atomically, 0600)
    and NAME.pub by its public half; PolicyError when there is no NAME.key to rotate
    (or it is not owner-only)."""
    private_path = out_dir / f"{check_name(name)}.key"
    if not private_path.exists():
        raise PolicyError(f"{private_path} does not exist: make it with `mrs keys new {name}`")
    identity = load_identity(private_path)
    if identity.name != name:
        raise PolicyError(f"{private_path} holds the key of {identity.name!r}, not {name!r}")
    new = identity.rotated()
    public_path = out_dir / f"{name}.pub"
    for path, document, mode in (
        (private_path, _private_document(new), 0o600),
        (public_path, _public_document(new.public), 0o644),
    ):
        temporary = path.with_name(f".{path.name}.rotating")
        temporary.unlink(missing_ok=True)
        _write_new(temporary, document, mode)
        os.replace(temporary, path)
    return private_path, public_path


def load_identity(path: str | os.PathLike[str]) -> Identity:
    """An identity from its NAME.key file; PolicyError if it is not one, or if others
    than its owner may read it (as ssh refuses such a key: it may have leaked)."""
    # What the file is comes first: a NAME.pub given for NAME.key (an easy slip, they
    # sit side by side) was refused as a private key others may read, with advice
    # to chmod it and make a new key. Reading it before the mode check uses nothing.
    document = _read_document(Path(path), PRIVATE_KIND)
    _check_owner_only(Path(path))
    try:
        return Identity(
            check_name(document["name"]),
            Ed25519PrivateKey.from_private_bytes(_b64(document["sign_private"])),
            X25519PrivateKey.from_private_bytes(_b64(document["encrypt_private"])),
            tuple(
                X25519PrivateKey.from_private_bytes(_b64(text))
                for text in list(document.get("encrypt_previous") or ())[:PREVIOUS_KEYS_MAX]
            ),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise PolicyError(f"{path}: not a valid identity key file ({error})") from None


def load_public_keys(path: str | os.PathLike[str]) -> PublicKeys:
    """Someone's public keys from their NAME.pub file; PolicyError if it is not one."""
    document = _read_document(Path(path), PUBLIC_KIND)
    try:
        return PublicKeys(
            check_name(document["name"]),
            Ed25519PublicKey.from_public_bytes(_b64(document["sign_public"])),
            X25519PublicKey.from_public_bytes(_b64(document["encrypt_public"])),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise PolicyError(f"{path}: not a valid public key file ({error})") from None


class Keyring:
    """The public keys of a directory of NAME.pub files, read when first asked for and
    again when the file changes (another inode, size, modification or change time):
    a key rotated by replacing NAME.pub applies to the next message, in a process that
    runs on, as a removed NAME.pub revokes it. The change time too: `cp -p` over the
    old file keeps its inode and size and sets the modification time to the source's,
    which a cached key then outlived. A stat per look-up, against ~100 us of
    cryptography."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._keys: dict[str, tuple[tuple[int, int, int, int], PublicKeys]] = {}

    def get(self, name: str) -> PublicKeys:
        """The public keys of `name`; PolicyError when there is no NAME.pub."""
        path = self.directory / f"{check_name(name)}.pub"
        try:
            status = path.stat()
        except FileNotFoundError:
            self._keys.pop(name, None)
            raise PolicyError(f"no public key for {name!r} ({path} does not exist)") from None
        except OSError as error:
            raise PolicyError(f"{path}: cannot read: {error.strerror or error}") from None
        stamp = (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        cached = self._keys.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        keys = load_public_keys(path)
        if keys.name != name:
            raise PolicyError(f"{path} holds the key of {keys.name!r}, not {name!r}")
        self._keys[name] = (stamp, keys)
        return keys


def _private_document(identity: Identity) -> dict:
    return {
        "kind": PRIVATE_KIND,
        "name": identity.name,
        "sign_private": _text(identity.signing_key.private_bytes_raw()),
        "encrypt_private": _text(identity.decrypt_key.private_bytes_raw()),
        **(
            {
                "encrypt_previous": [
                    _text(k.private_bytes_raw()) for k in identity.previous_decrypt_keys
                ]
            }
            if identity.previous_decrypt_keys
            else {}
        ),
    }


def _public_document(keys: PublicKeys) -> dict:
    return {
        "kind": PUBLIC_KIND,
        "name": keys.name,
        "sign_public": _text(keys.verify_key.public_bytes_raw()),
        "encrypt_public": _text(keys.encrypt_key.public_bytes_raw()),
    }


def _write_new(path: Path, document: dict, mode: int) -> None:
    # O_EXCL: never follow a planted file; fchmod: the umask cannot widen or narrow it.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(descriptor, mode)
        os.write(descriptor, (json.dumps(document, indent=1) + "\n").encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _check_owner_only(path: Path) -> None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as error:
        raise PolicyError(f"{path}: cannot read: {error.strerror or error}") from None
    if mode & 0o077:
        raise PolicyError(
            f"{path}: permissions {mode:04o} let others read this private key; "
            f"chmod 600 {path} (and make a new key if it may have leaked)"
        )


def _read_document(path: Path, kind: str) -> dict:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise PolicyError(f"{path}: cannot read: {error.strerror or error}") from None
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
        raise PolicyError(f"{path}: not a key file (not JSON)") from None
    found = document.get("kind") if isinstance(document, dict) else None
    if found == PUBLIC_KIND and kind == PRIVATE_KIND:
        raise PolicyError(
            f"{path} is a public key file; the identity is the private key beside it "
            "(NAME.key, made by `mrs keys new`)"
        )
    if found == PRIVATE_KIND and kind == PUBLIC_KIND:
        raise PolicyError(
            f"{path} holds a private key where a public one belongs: copy NAME.pub there, "
            "and make a new key if others may have read this one"
        )
    if found != kind:
        raise PolicyError(f"{path}: not a {kind} file")
    return document


def _text(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _b64(text: object) -> bytes:
    if not isinstance(text, str):
        raise TypeError("key must be a base64 string")
    return base64.b64decode(text, validate=True)
