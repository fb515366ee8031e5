"""`mrs certs` on a directory that holds the bus's CA issues only the certificates
missing there, with that CA (a group added to the bus, a file deleted): the only way
was `--force`, a new CA that every group and client of the bus must then be given."""

from __future__ import annotations

from cryptography import x509

from tests.process.test_certs import mrs
from tests.process.test_tls import write_bus


def _check_signed_by(cert_path, ca_path) -> None:
    """Raises (InvalidSignature, ValueError) unless the CA issued the certificate."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_path.read_bytes()))


def test_a_missing_group_certificate_is_issued_with_the_ca_already_there(tmp_path) -> None:
    config, out = write_bus(tmp_path), tmp_path / "certs"
    assert mrs("certs", "--config", str(config), "--out", str(out)).returncode == 0
    kept = {name: (out / name).read_bytes() for name in ("ca.pem", "ca.key", "group-1.pem")}
    (out / "group-2.pem").unlink()
    (out / "group-2.key").unlink()
    again = mrs("certs", "--config", str(config), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "issued group-2 with the CA in" in again.stdout
    assert {name: (out / name).read_bytes() for name in kept} == kept
    _check_signed_by(out / "group-2.pem", out / "ca.pem")
