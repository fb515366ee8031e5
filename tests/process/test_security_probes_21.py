"""Security probes, round 21: an operator's and an attacker's mistakes with secret
files, keys and TLS keys, against real `mrs serve` processes where the path is real.
Each test names the defect it found."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from clients import (
    BadParameter,
    ClientCredentials,
    DeliveryMode,
    MrsError,
    NotAuthorized,
    Protection,
    Uma,
    connect,
    tls_context,
)
from mrs.model import Address, Status
from mrs.protection.envelope import Quality, seal
from mrs.protection.errors import PolicyError, ProtectionError
from mrs.protection.keys import Identity, load_identity, write_identity
from mrs.protection.policy import load_policies
from mrs.security.creds import CredsError, load
from sim.processes import ServerStartError
from tests.auth_helpers import SecureBus, creds
from tests.process.test_auth_lifecycle import wait_for_log

SECRET_TAIL = b"secret-bytes-of-the-link"


@pytest.fixture
def linked(tmp_path):
    bus = SecureBus(tmp_path / "linked")
    bus.start()
    yield bus
    bus.stop()


async def test_a_link_secret_that_is_not_text_keeps_the_group_serving(linked) -> None:
    """Defect: a link secret replaced by a file that is not UTF-8 (a half copy, the
    wrong file) escaped the reload as UnicodeDecodeError and stopped the running
    group ("mrs: unexpected error"); the docs promise that a file that does not load
    is logged and the credentials in force stay in force. The same file stopped
    `mrs serve` and `ClientCredentials.from_file` with a bare UnicodeDecodeError."""
    secret = linked.directory / "secrets" / "group-2.secret"
    good = secret.read_bytes()
    secret.write_bytes(b"\xff\xfe" + SECRET_TAIL)
    log_path = linked.directory / "group2.log"
    await wait_for_log(log_path, "credentials not reloaded")
    async with connect(linked.address(1), "1.13", credentials=creds("producer")) as producer:
        # UMA SAF: stored at group 1 if the link is not up yet, drained when it is
        await producer.put(b"still serving", "2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
    async with connect(linked.address(2), "2.10", credentials=creds("consumer2")) as client:
        assert (await client.get(timeout=10)).body == b"still serving"
    assert linked.processes[2].running
    log = linked.log(2)
    assert f"secret file {secret} is not UTF-8 text" in log
    assert SECRET_TAIL.decode() not in log  # the error quotes no byte of the secret
    with pytest.raises(MrsError, match="is not UTF-8 text"):
        ClientCredentials.from_file("consumer2", secret)
    linked.processes[2].terminate()
    with pytest.raises(ServerStartError, match="is not UTF-8 text"):
        linked.processes[2].start()
    secret.write_bytes(good)


async def test_a_wrong_password_is_logged_after_another_refusal_of_its_host(
    tmp_path,
) -> None:
    """Defect: authentication refusals were logged once per host per 10 s whatever
    their kind, so a wrong password (someone guessing, or an application given the
    wrong file) right after any other refusal from that host (a tool run without
    credentials) left no line naming the principal. Now each kind of failure of a
    host has its own line; the password itself is never in it."""
    bus = SecureBus(tmp_path / "single", group_ids=(1,))
    bus.start()
    try:
        address = bus.address(1)
        with pytest.raises(NotAuthorized):
            async with connect(address, None, reconnect=None):
                pass
        with pytest.raises(NotAuthorized):
            async with connect(address, None, credentials=creds("ops", "guess-1234")):
                pass
        await wait_for_log(bus.directory / "group1.log", "authentication failed for 'ops'")
        assert "guess-1234" not in bus.log(1)
    finally:
        bus.stop()


def encrypted_client_key(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key encrypted with a passphrase (as
    `openssl req` makes it without -nodes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "client.pem", directory / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption = serialization.BestAvailableEncryption(b"passphrase")
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return cert_path, key_path


def test_an_encrypted_client_key_is_one_clear_error(tmp_path) -> None:
    """Defect: a client key with a passphrase made OpenSSL prompt `Enter PEM pass
    phrase:` on the terminal (blocking the program and its event loop), and without
    a terminal failed as `Invalid argument`. A key without its cert was ignored."""
    cert, key = encrypted_client_key(tmp_path)
    with pytest.raises(BadParameter, match="is encrypted \\(it has a passphrase\\)"):
        tls_context(ca=cert, cert=cert, key=key)
    with pytest.raises(BadParameter, match="given without its cert"):
        tls_context(ca=cert, key=key)


def test_key_files_in_the_wrong_place_are_named_for_what_they_are(tmp_path) -> None:
    """Defect: `identity="keys/SHOP.pub"` (the public file beside SHOP.key) was
    refused as a private key others may read, with advice to chmod it and make a new
    key; a private key copied into keys_dir as NAME.pub was only `not a
    mrs-public-key-v1 file`. Both now say what the file is."""
    keys = tmp_path / "keys"
    private, public = write_identity(Identity.generate("SHOP"), keys)
    policies = tmp_path / "protection.toml"
    policies.write_text(
        f'keys_dir = "{keys}"\n[[policy]]\nqueue = "1.10"\nprotection = "integrity"\n'
    )
    with pytest.raises(PolicyError, match="is a public key file") as refused:
        Protection.load(policies, identity=public)
    assert "chmod" not in str(refused.value)
    sealed = seal(load_identity(private), Quality.INTEGRITY, b"order 1")
    shutil.copy(private, public)  # the slip: NAME.key copied where NAME.pub belongs
    with pytest.raises(ProtectionError, match="holds a private key where a public one"):
        Protection.load(policies).check(Address(1, 10), sealed)


@pytest.mark.parametrize("which", ["credentials", "policies"])
def test_a_deeply_nested_file_is_one_line(tmp_path, which: str) -> None:
    """Defect: a credentials or policy file nested deeper than tomllib recurses
    escaped as RecursionError (a running group reloading its credentials stopped)."""
    path = tmp_path / f"{which}.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    error = CredsError if which == "credentials" else PolicyError
    with pytest.raises(error, match="nested too deep"):
        (load if which == "credentials" else load_policies)(path)


@pytest.mark.parametrize(
    ("name", "password", "problem"),
    [
        ("ops", b"pw-bytes-1234", "must be a str, not bytes"),
        ("ops", None, "must be a str, not NoneType"),
        ("ops", "pw-\udcff-1234", "is not valid text"),
        (b"ops", "pw-text-1234", "the name must be a str"),
        ("o" * 5000, "pw-text-1234", "a name of 5000 characters"),
    ],
)
def test_credentials_that_can_never_log_in_are_refused_at_once(name, password, problem) -> None:
    """Defect: a password read as bytes (`open(f, "rb").read()`), an unset variable
    (None) or undecodable text escaped `connect` as AttributeError or
    UnicodeEncodeError from the KDF's worker thread; a name no principal can have
    was sent and answered PROTOCOL_ERROR (`auth frame of 5047 bytes`). Now it is one
    BADPARAM line (CredsError, as `from_file`) when the credentials are made, and it
    shows no password."""
    with pytest.raises(CredsError, match=problem) as refused:
        ClientCredentials(name, password)
    assert refused.value.status == Status.BADPARAM
    assert "1234" not in str(refused.value)
