"""`mrs certs`: a test CA and certificates for every group of a bus, and the config lines.

Why: turning TLS on should be one step for a newcomer. `mrs certs --config bus.toml
--out certs` writes a CA, one certificate per group (valid as server and as link
client, named `mrs-group-N` so links can tell groups apart, plus the listen host,
`localhost` and 127.0.0.1) and one client certificate for applications, then prints
the `[group.tls]` table to add to each group (or, with `--apply`, adds them).

Keys are EC P-256 made with `cryptography`; files are 0600 and the directory 0700
whatever the umask. This is a *test* CA: its key sits beside the certificates. In
production, use your own CA and give each group a certificate carrying the name
`mrs-group-N` (docs/security.md).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mrs.config.bus import BusConfig, GroupConfig, load_config
from mrs.offline.journal_files import operator_path
from mrs.security.tls import group_server_name
from mrs.tools.cli_support import EXIT_USAGE, CommandError

VALID_DAYS = 825
"""What browsers and most TLS stacks accept for a leaf certificate."""
CLIENT_NAME = "mrs-client"
_BOTH_ENDS = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
"""Group certificates serve clients and dial links; one purpose list for all."""
FILE_MODE = 0o600
DIR_MODE = 0o700


@dataclass(frozen=True, slots=True)
class Issued:
    """What `make_certs` wrote: paths by role."""

    ca: Path
    groups: dict[int, tuple[Path, Path]]
    client: tuple[Path, Path]
    added: tuple[str, ...] | None = None
    """The certificates issued with a CA already there (file stems); None: all new."""


class CertsError(CommandError):
    """The output directory or the config file cannot be used (one line)."""


def make_certs(bus: BusConfig, out: Path, *, overwrite: bool = False) -> Issued:
    """Write ca.pem/ca.key, group-N.pem/.key for each group, client.pem/.key. With a CA
    in `out` already (and no `overwrite`), issue with it only the certificates missing
    there (`_missing_with_the_ca`)."""
    out = out.absolute()
    if (out / "ca.pem").exists() and not overwrite:
        return _missing_with_the_ca(bus, out)
    _private_dir(out)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "MRS test CA")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / "ca.key", _key_pem(ca_key))
    _write(out / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM))
    groups = {
        group.id: _leaf(out, f"group-{group.id}", _group_names(group), ca_cert, ca_key, now)
        for group in bus.groups.values()
    }
    client = _leaf(out, "client", [x509.DNSName(CLIENT_NAME)], ca_cert, ca_key, now)
    return Issued(out / "ca.pem", groups, client)


def _missing_with_the_ca(bus: BusConfig, out: Path) -> Issued:
    """The certificates of the bus that `out` lacks (a group added to the bus since,
    a file deleted), issued with the CA already there; those present are kept. Why:
    the only way was `--force`, a new CA, which every client and group of the bus must
    then be given, to add one group's certificate. CertsError when none is missing
    (`--force` replaces them all) or the CA's key cannot be read."""
    ca_cert, ca_key = _existing_ca(out)
    now = datetime.datetime.now(datetime.UTC)
    wanted = {f"group-{group.id}": _group_names(group) for group in bus.groups.values()}
    wanted["client"] = [x509.DNSName(CLIENT_NAME)]
    missing = [
        stem
        for stem in wanted
        if not ((out / f"{stem}.pem").exists() and (out / f"{stem}.key").exists())
    ]
    if not missing:
        raise CertsError(
            f"{out} holds the CA and every certificate of the bus already; pass --force to "
            "make a new CA and new certificates (every group and client then needs it)",
            EXIT_USAGE,
        )
    for stem in missing:
        _leaf(out, stem, wanted[stem], ca_cert, ca_key, now)
    paths = {stem: (out / f"{stem}.pem", out / f"{stem}.key") for stem in wanted}
    groups = {group.id: paths[f"group-{group.id}"] for group in bus.groups.values()}
    return Issued(out / "ca.pem", groups, paths["client"], tuple(missing))


def _existing_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA in `out` (ca.pem and ca.key), or CertsError saying what is wrong."""
    try:
        ca_cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
        ca_key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
    except (OSError, ValueError, TypeError) as error:
        raise CertsError(
            f"{out}/ca.pem exists but its CA cannot issue certificates ({error}); pass "
            "--force to make a new CA",
            EXIT_USAGE,
        ) from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertsError(f"{out}/ca.key is not an EC key; pass --force to make a new CA")
    return ca_cert, ca_key


def _group_names(group: GroupConfig) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [
        x509.DNSName(group_server_name(group.id)),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        address = ipaddress.ip_address(group.listen_host)
        if str(address) not in ("127.0.0.1", "0.0.0.0", "::"):
            names.append(x509.IPAddress(address))
    except ValueError:
        if group.listen_host != "localhost":
            names.append(x509.DNSName(group.listen_host))
    return names


def _leaf(
    out: Path,
    stem: str,
    names: list[x509.GeneralName],
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)])
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(_BOTH_ENDS), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_path, cert_path = out / f"{stem}.key", out / f"{stem}.pem"
    _write(key_path, _key_pem(key))
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _private_dir(path: Path) -> None:
    """--out is made, its parents are not: a mistyped parent is refused in one line, as
    `mrs keys new` and `mrs creds` refuse one, rather than a tree made where no one looks."""
    if not path.parent.is_dir():
        raise CertsError(
            f"cannot use {path} for certificates: {path.parent} does not exist (create it first)"
        )
    try:
        path.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(path, DIR_MODE)
    except OSError as error:
        raise CertsError(f"cannot use {path} for certificates: {error.strerror}") from None


def _write(path: Path, data: bytes) -> None:
    """Owner-only from the first byte (O_CREAT with 0600), whatever the umask."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(descriptor, FILE_MODE)
        os.write(descriptor, data)
    finally:
        os.close(descriptor)


def config_lines(bus: BusConfig, issued: Issued) -> dict[int, str]:
    """The `[group.tls]` table for each group, paths relative to the config file."""
    base = bus.path.parent
    tables = {}
    for group_id, (cert, key) in issued.groups.items():
        tables[group_id] = "\n".join(
            [
                "[group.tls]",
                f'ca = "{_relative(issued.ca, base)}"',
                f'cert = "{_relative(cert, base)}"',
                f'key = "{_relative(key, base)}"',
                'client_cert = "required"',
            ]
        )
    return tables


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def client_snippet(bus: BusConfig, issued: Issued) -> str:
    """How an application connects with the client certificate."""
    cert, key = issued.client
    group = next(iter(bus.groups.values()))
    return (
        "from clients import connect, tls_context\n"
        f'tls = tls_context(ca="{issued.ca}", cert="{cert}", key="{key}")\n'
        f'async with connect("{group.listen_host}:{group.listen_port}", '
        'queue="...", tls=tls) as q: ...'
    )


def apply_to_config(bus: BusConfig, tables: dict[int, str]) -> str:
    """The config file's text with each group's table added at the end of its section
    (before the next top-level [[group]] or [[link]]). Refuses a group that has one."""
    lines = bus.path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() in ("[[group]]", "[[link]]")]
    group_starts = [i for i in starts if lines[i].strip() == "[[group]]"]
    if len(group_starts) != len(bus.groups):
        raise CertsError(
            f"{bus.path}: cannot find one [[group]] line per group; add the tables by hand"
        )
    if any(line.strip() == "[group.tls]" for line in lines):
        raise CertsError(
            f"{bus.path} already has a [group.tls] table; edit it by hand (without --apply, "
            "the certificates --out lacks are issued and their tables printed)"
        )
    by_position = _groups_in_file_order(bus, lines, group_starts)
    for start, group_id in reversed(list(zip(group_starts, by_position, strict=True))):
        following = [i for i in starts if i > start]
        end = following[0] if following else len(lines)
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        lines[end:end] = ["", *tables[group_id].splitlines()]
    return "\n".join(lines) + "\n"


def _groups_in_file_order(bus: BusConfig, lines: list[str], group_starts: list[int]) -> list[int]:
    """Each [[group]] section's id, read from its `id = N` line."""
    ids = []
    for index, start in enumerate(group_starts):
        end = group_starts[index + 1] if index + 1 < len(group_starts) else len(lines)
        found = [
            int(value)
            for line in lines[start + 1 : end]
            if (parts := line.split("=", 1))[0].strip() == "id"
            and (value := parts[1].split("#")[0].strip()).isdigit()
        ]
        if not found or found[0] not in bus.groups:
            raise CertsError(f"{bus.path}: cannot read the id of the group at line {start + 1}")
        ids.append(found[0])
    return ids


def add_certs_parser(commands: argparse._SubParsersAction) -> None:
    certs = commands.add_parser(
        "certs",
        help="a test CA and TLS certificates for every group of a bus (and a client)",
        description="Write a test CA, one certificate per group and one client certificate "
        "into --out (files 0600, directory 0700), then print the [group.tls] table for "
        "each group (--apply: add them to the config file). See docs/security.md.",
    )
    certs.add_argument(
        "--config", type=operator_path, required=True, help="bus configuration (TOML)"
    )
    certs.add_argument("--out", type=operator_path, required=True, help="directory for the files")
    certs.add_argument("--apply", action="store_true", help="add the tables to --config")
    certs.add_argument(
        "--force", action="store_true", help="a new CA in --out, and every certificate"
    )
    certs.set_defaults(run=run_certs)


def run_certs(args: argparse.Namespace) -> int:
    bus = load_config(args.config)
    if args.apply and "[group.tls]" in bus.path.read_text():
        raise CertsError(f"{bus.path} already has a [group.tls] table; edit it by hand")
    issued = make_certs(bus, args.out, overwrite=args.force)
    tables = config_lines(bus, issued)
    if issued.added is None:
        print(f"wrote a test CA and {len(issued.groups) + 1} certificates to {issued.ca.parent}")
    else:
        print(
            f"issued {', '.join(issued.added)} with the CA in {issued.ca.parent} "
            "(the certificates there already are kept)"
        )
    if args.apply:
        text = apply_to_config(bus, tables)
        bus.path.write_text(text)
        load_config(bus.path)  # what we wrote must load (files exist, keys match)
        print(f"added [group.tls] to {len(tables)} groups in {bus.path}")
    else:
        for group_id, table in tables.items():
            print(f"\n# add at the end of group {group_id}'s section of {bus.path.name}:")
            print(table)
    print("\n# an application connects with the client certificate:")
    print(client_snippet(bus, issued))
    return 0
