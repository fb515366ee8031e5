"""Security as an operator renewing and copying TLS files meets it, against real
`mrs serve` processes. Each test names the defect it found (or the docs' claim it
holds)."""

from __future__ import annotations

import datetime
import socket
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.process.test_tls import TlsBus

HANDSHAKE_WAIT_S = 10.0


def renewed_group_certificate(certs: Path, group_id: int, out: Path) -> tuple[Path, Path]:
    """A new key and certificate for group `group_id`, signed by the bus CA with the
    names of its current certificate (what renewing one before it expires gives),
    written into `out` as the operator's new files (0644: a copy under umask 022)."""
    ca_key = serialization.load_pem_private_key((certs / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    old = x509.load_pem_x509_certificate((certs / f"group-{group_id}.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    for extension in old.extensions:
        if not isinstance(extension.value, x509.AuthorityKeyIdentifier | x509.SubjectKeyIdentifier):
            builder = builder.add_extension(extension.value, extension.critical)
    cert = builder.sign(ca_key, hashes.SHA256())
    out.mkdir(exist_ok=True)
    cert_path, key_path = out / f"group-{group_id}.pem", out / f"group-{group_id}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for path in (cert_path, key_path):
        path.chmod(0o644)
    return cert_path, key_path


def served_certificate(bus: TlsBus, group_id: int) -> bytes:
    """The DER certificate group `group_id` shows a client now (a full handshake)."""
    host, _, port = bus.address(group_id).rpartition(":")
    context = bus.client_tls()
    with (
        socket.create_connection((host, int(port)), timeout=HANDSHAKE_WAIT_S) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(
        serialization.Encoding.DER
    )


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_tls_private_key_readable_by_others_is_narrowed_at_start(tmp_path: Path) -> None:
    """Defect: a group narrowed its credentials file and link secret to 0600 when a
    copy (`cp` under umask 022) had left them 0644, but not the private key of its
    `[group.tls]`, which proves the group to clients and peers as much as the link
    secret does: every local user could read it, and the group said nothing. Now
    the group narrows it when it loads it, with one WARNING saying so."""
    bus = TlsBus(tmp_path / "bus")
    key = bus.certs / "group-1.key"
    key.chmod(0o644)
    bus.processes[1].start()
    try:
        assert mode_of(key) == 0o600
        assert f"TLS private key {key} was readable by others (0644)" in bus.log(1)
    finally:
        bus.processes[1].terminate()


def test_a_renewed_certificate_is_served_without_a_restart_and_its_key_narrowed(
    tmp_path: Path,
) -> None:
    """docs/security.md ("Renewing certificates"): the group reads its certificate
    files again when they change and serves the new ones from the next handshake,
    no restart; a key copied before its certificate (the files disagree for a
    moment) leaves the ones in force, said once. Defect held too: the renewed key,
    moved into place 0644 (`mv`), was left readable by others; it is narrowed when it is loaded."""
    bus = TlsBus(tmp_path / "bus")
    cert, key = bus.certs / "group-1.pem", bus.certs / "group-1.key"
    bus.processes[1].start()
    try:
        first = served_certificate(bus, 1)
        assert first == der_of(cert)
        new_cert, new_key = renewed_group_certificate(bus.certs, 1, tmp_path / "renewed")
        renewed = der_of(new_cert)
        new_key.replace(key)  # `mv`, the key first: the files disagree for a moment
        assert served_certificate(bus, 1) == first
        assert "do not load" in bus.log(1)
        new_cert.replace(cert)
        assert served_certificate(bus, 1) == renewed
        assert "changed: new connections use them" in bus.log(1)
        assert mode_of(key) == 0o600
        assert f"TLS private key {key} was readable by others" in bus.log(1)
    finally:
        bus.processes[1].terminate()
