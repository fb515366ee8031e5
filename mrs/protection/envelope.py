"""Seal and open one message body: signed (integrity) or signed then encrypted (privacy).

The sealed body starts with MAGIC, as an AMS-protected message starts with its PDMQ
header, so anyone (a group putting it on a DLQ, `mrs dump`) can tell it is protected
without a key, and no one can read or change it without one. Only standard
constructions from `cryptography`, nothing home-made:

- integrity: Ed25519 signature over (version, quality of protection, signer, the
  recipient names, data);
- privacy: the signed form above, encrypted with AES-256-GCM under a fresh content
  key; the content key wrapped for each recipient with ECDH (an ephemeral X25519 key
  and the recipient's X25519 key), HKDF-SHA256, AES-256-GCM key wrap (the shape of
  JWE's ECDH-ES+A256KW). The envelope header (recipients, ephemeral key) is the
  AEAD's associated data, so changing it fails decryption.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import msgpack
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mrs.protection.errors import PolicyError, ProtectionError
from mrs.protection.keys import Identity, Keyring, PublicKeys

MAGIC = b"MRSPDMQ1"
"""First bytes of every protected body (AMS's PDMQ header plays this part)."""
VERSION = 1
CONTEXT = b"mrs-protection-v1"
"""Domain separation for signatures and key derivation."""
NONCE_BYTES = 12
KEY_BYTES = 32
RECIPIENTS_MAX = 64
"""A bound on the recipient list a reader will walk (an envelope is untrusted input)."""


class Quality(Enum):
    """The quality of protection of a policy (AMS: integrity, privacy)."""

    NONE = "none"
    INTEGRITY = "integrity"
    PRIVACY = "privacy"

    @property
    def rank(self) -> int:
        return ("none", "integrity", "privacy").index(self.value)


@dataclass(frozen=True)
class Opened:
    """An envelope opened and verified: who signed it, how it was protected, the data."""

    quality: Quality
    signer: str
    data: bytes


def is_protected(body: bytes) -> bool:
    """True when `body` is a protected envelope (by its header alone, no key)."""
    return bytes(body[: len(MAGIC)]) == MAGIC


def seal(
    identity: Identity, quality: Quality, data: bytes, recipients: Sequence[PublicKeys] = ()
) -> bytes:
    """`data` signed by `identity`, and for PRIVACY encrypted to `recipients`."""
    if quality is Quality.INTEGRITY:
        names = []
    elif quality is Quality.PRIVACY:
        if not recipients:
            raise ProtectionError("a privacy policy needs at least one recipient")
        names = sorted({keys.name for keys in recipients})
    else:
        raise ProtectionError(f"cannot seal with quality {quality.value!r}")
    signature = identity.signing_key.sign(_signed(quality, identity.name, names, data))
    if quality is Quality.INTEGRITY:
        fields = {"v": VERSION, "qop": quality.value, "signer": identity.name}
        return _pack({**fields, "data": bytes(data), "sig": signature})
    return _encrypt(identity.name, data, signature, recipients, names)


def open_envelope(body: bytes, keyring: Keyring, reader: Identity | None) -> Opened:
    """Verify (and for privacy decrypt, as `reader`) a protected body.

    ProtectionError says what is wrong: not an envelope, malformed, a signature that
    does not verify (tampered), not encrypted to `reader`."""
    envelope = _unpack(body)
    quality = _quality(envelope.get("qop"))
    if quality is Quality.INTEGRITY:
        signer, data, signature = (
            _text(envelope, "signer"),
            _bytes(envelope, "data"),
            _bytes(envelope, "sig"),
        )
        names: list[str] = []
    else:
        signer, data, signature, names = _decrypt(envelope, reader)
    try:
        public = keyring.get(signer)
    except PolicyError as unknown:
        raise ProtectionError(f"signed by {signer!r}, whose key is unknown: {unknown}") from None
    try:
        public.verify_key.verify(signature, _signed(quality, signer, names, data))
    except InvalidSignature:
        raise ProtectionError(
            f"signature of {signer!r} does not verify: the message was changed after it "
            "was signed, or not signed by that key"
        ) from None
    return Opened(quality, signer, data)


def _encrypt(
    signer: str, data: bytes, signature: bytes, recipients: Sequence[PublicKeys], names: list[str]
) -> bytes:
    ephemeral = X25519PrivateKey.generate()
    ephemeral_public = ephemeral.public_key().public_bytes_raw()
    content_key = AESGCM.generate_key(bit_length=256)
    wrapped = {}
    for keys in recipients:
        nonce = os.urandom(NONCE_BYTES)
        wrap_key = _wrap_key(
            ephemeral.exchange(keys.encrypt_key), ephemeral_public, keys.encrypt_key
        )
        wrapped[keys.name] = [nonce, AESGCM(wrap_key).encrypt(nonce, content_key, CONTEXT)]
    header = {"v": VERSION, "qop": Quality.PRIVACY.value, "epk": ephemeral_public, "to": names}
    nonce = os.urandom(NONCE_BYTES)
    inner = msgpack.packb([signer, bytes(data), signature], use_bin_type=True)
    ciphertext = AESGCM(content_key).encrypt(nonce, inner, _header_bytes(header))
    return _pack({**header, "keys": wrapped, "nonce": nonce, "ct": ciphertext})


def _decrypt(envelope: dict, reader: Identity | None) -> tuple[str, bytes, bytes, list[str]]:
    names = envelope.get("to")
    if (
        not isinstance(names, list)
        or not 0 < len(names) <= RECIPIENTS_MAX
        or not all(isinstance(n, str) for n in names)
    ):
        raise ProtectionError("malformed protected message: bad recipient list")
    if reader is None or reader.name not in names:
        who = "no identity" if reader is None else repr(reader.name)
        raise ProtectionError(
            f"encrypted for {', '.join(names)}; this reader ({who}) is not a recipient"
        )
    ephemeral_public = _bytes(envelope, "epk")
    wrapped = envelope.get("keys")
    entry = wrapped.get(reader.name) if isinstance(wrapped, dict) else None
    if not (
        isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, bytes) for x in entry)
    ):
        raise ProtectionError("malformed protected message: no wrapped key for the reader")
    try:
        content_key = _unwrap(reader, ephemeral_public, entry)
        header = {k: envelope.get(k) for k in ("v", "qop", "epk", "to")}
        inner = AESGCM(content_key).decrypt(
            _bytes(envelope, "nonce"), _bytes(envelope, "ct"), _header_bytes(header)
        )
    except (InvalidTag, ValueError):
        raise ProtectionError(
            "cannot decrypt: the message was changed after it was encrypted, or the "
            "reader's key is not the one it was encrypted to"
        ) from None
    try:
        signer, data, signature = msgpack.unpackb(inner, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise ProtectionError("malformed protected message: bad signed content") from None
    if not (isinstance(signer, str) and isinstance(data, bytes) and isinstance(signature, bytes)):
        raise ProtectionError("malformed protected message: bad signed content")
    return signer, data, signature, names


def _unwrap(reader: Identity, ephemeral_public: bytes, entry: list) -> bytes:
    """The content key wrapped for `reader`: by its newest decryption key, else by
    one of before its rotations (the message was sealed for it); InvalidTag if none
    unwraps it."""
    ephemeral = X25519PublicKey.from_public_bytes(ephemeral_public)
    for key in (reader.decrypt_key, *reader.previous_decrypt_keys):
        wrap_key = _wrap_key(key.exchange(ephemeral), ephemeral_public, key.public_key())
        try:
            return AESGCM(wrap_key).decrypt(entry[0], entry[1], CONTEXT)
        except InvalidTag:
            continue
    raise InvalidTag


def _wrap_key(shared: bytes, ephemeral_public: bytes, encrypt_key: X25519PublicKey) -> bytes:
    info = CONTEXT + b" wrap" + ephemeral_public + encrypt_key.public_bytes_raw()
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(shared)


def _signed(quality: Quality, signer: str, names: list[str], data: bytes) -> bytes:
    return msgpack.packb(
        [CONTEXT, VERSION, quality.value, signer, names, bytes(data)], use_bin_type=True
    )


def _header_bytes(header: dict) -> bytes:
    return msgpack.packb(
        [CONTEXT, header["v"], header["qop"], header["epk"], header["to"]], use_bin_type=True
    )


def _pack(fields: dict) -> bytes:
    return MAGIC + msgpack.packb(fields, use_bin_type=True)


def _unpack(body: bytes) -> dict:
    if not is_protected(body):
        raise ProtectionError("not a protected message (no protection header)")
    try:
        envelope = msgpack.unpackb(bytes(body[len(MAGIC) :]), raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise ProtectionError("malformed protected message: unreadable envelope") from None
    if not isinstance(envelope, dict) or envelope.get("v") != VERSION:
        raise ProtectionError("malformed protected message: unknown envelope version")
    return envelope


def _quality(value: object) -> Quality:
    if value == Quality.INTEGRITY.value:
        return Quality.INTEGRITY
    if value == Quality.PRIVACY.value:
        return Quality.PRIVACY
    raise ProtectionError(f"malformed protected message: quality of protection {value!r}")


def _bytes(envelope: dict, key: str) -> bytes:
    value = envelope.get(key)
    if not isinstance(value, bytes):
        raise ProtectionError(f"malformed protected message: {key} missing")
    return value


def _text(envelope: dict, key: str) -> str:
    value = envelope.get(key)
    if not isinstance(value, str):
        raise ProtectionError(f"malformed protected message: {key} missing")
    return value
