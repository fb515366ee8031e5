"""SCRAM-SHA-256 arithmetic (RFC 5802/7677 shape): verifiers, proofs, signatures.

Why SCRAM: the password never crosses the wire (the client sends a proof bound to
both nonces, useless for a replay), and the server stores only a *verifier*
(salt, iterations, StoredKey = H(ClientKey), ServerKey) that is not
plaintext-equivalent: stealing the credentials file does not let anyone log in
without also eavesdropping a handshake or brute-forcing the password through
PBKDF2. The server signature proves to the client that it talks to a holder of the
verifier (mutual). The KDF is PBKDF2-HMAC-SHA256 from `cryptography` (OpenSSL); HMAC
and SHA-256 come from the standard library. Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

ITERATIONS_DEFAULT = 100_000
"""PBKDF2 rounds for a new credential: ~50 ms per derivation here, paid by the client
once per connection (the server pays no KDF at all)."""
ITERATIONS_MIN = 1_000
ITERATIONS_MAX = 10_000_000
SALT_BYTES = 16
NONCE_BYTES = 24
KEY_BYTES = 32


@dataclass(frozen=True, slots=True)
class Verifier:
    """What the server keeps of a password: enough to check a proof, not to make one."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """PBKDF2-HMAC-SHA256(password, salt, iterations): the client's secret key."""
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, iterations=iterations)
    return kdf.derive(password.encode("utf-8"))


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def client_key(salted: bytes) -> bytes:
    return _hmac(salted, b"Client Key")


def server_key(salted: bytes) -> bytes:
    return _hmac(salted, b"Server Key")


def make_verifier(
    password: str, iterations: int = ITERATIONS_DEFAULT, salt: bytes | None = None
) -> Verifier:
    """A fresh verifier (random salt) for a password."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = salted_password(password, salt, iterations)
    return Verifier(
        salt, iterations, hashlib.sha256(client_key(salted)).digest(), server_key(salted)
    )


def client_proof(salted: bytes, auth_message: bytes) -> bytes:
    """ClientKey XOR HMAC(StoredKey, AuthMessage): proves the password, reveals nothing
    reusable (a new handshake has new nonces, so a new AuthMessage)."""
    key = client_key(salted)
    signature = _hmac(hashlib.sha256(key).digest(), auth_message)
    return bytes(a ^ b for a, b in zip(key, signature, strict=True))


def proof_valid(verifier: Verifier, auth_message: bytes, proof: bytes) -> bool:
    """Recover ClientKey from the proof and check H(ClientKey) == StoredKey."""
    if len(proof) != KEY_BYTES:
        return False
    signature = _hmac(verifier.stored_key, auth_message)
    recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    return hmac.compare_digest(hashlib.sha256(recovered).digest(), verifier.stored_key)


def server_signature(key: bytes, auth_message: bytes) -> bytes:
    """HMAC(ServerKey, AuthMessage): the server's half of the mutual proof."""
    return _hmac(key, auth_message)


def signature_valid(expected_key: bytes, auth_message: bytes, signature: bytes) -> bool:
    return hmac.compare_digest(server_signature(expected_key, auth_message), signature)


def nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def decoy_verifier(secret: bytes, name: str, iterations_in_use: Sequence[int]) -> Verifier:
    """A stable fake verifier for an unknown name, so the answer to "who?" does not
    tell an attacker which names exist (the proof then simply fails).

    Salt and rounds both come from HMAC(secret, name): the same for a name on every
    group and after every restart, as a real name's are. The rounds are one of the
    rounds real principals use, picked with their frequency, so a principal made
    with unusual rounds is not told apart by them: unknown names show them too.
    `iterations_in_use` is sorted (`decoy_iterations`)."""
    salt = _hmac(secret, b"salt:" + name.encode("utf-8"))[:SALT_BYTES]
    iterations = decoy_iterations(secret, name, iterations_in_use)
    return Verifier(salt, iterations, os.urandom(KEY_BYTES), os.urandom(KEY_BYTES))


def decoy_iterations(secret: bytes, name: str, iterations_in_use: Sequence[int]) -> int:
    """Rounds for an unknown name: a weighted pick among `iterations_in_use` (one per
    real principal, sorted) by a hash of the name; ITERATIONS_DEFAULT when there are
    none. Sorted by the caller once per credentials load, not here per name: a sort
    per name made an unknown name's challenge cost more the more principals a file
    has, a clock's way to tell it from a known one (mrs.security.authority `decoy`)."""
    if not iterations_in_use:
        return ITERATIONS_DEFAULT
    pick = int.from_bytes(_hmac(secret, b"rounds:" + name.encode("utf-8"))[:8], "big")
    return iterations_in_use[pick % len(iterations_in_use)]
