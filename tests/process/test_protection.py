"""End-to-end message protection without a server: the envelope (seal/open, tampering),
the policy check a get makes, the DLQ rules of the channel document, the policy file
and the key files. The same rules against real processes: test_protection_bus.py."""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients.protection import Protection, ProtectionRefused
from mrs.model import Address, Message
from mrs.protection.dead_letter import DeadLetterProtection, DeadLetterRefused
from mrs.protection.envelope import MAGIC, Quality, is_protected, open_envelope, seal
from mrs.protection.errors import MQRC_NOT_AUTHORIZED, PolicyError, ProtectionError
from mrs.protection.keys import Identity, Keyring, load_identity, write_identity
from mrs.protection.policy import Policy, load_policies, parse_policies
from mrs.testing.fuzz_targets import mutate

NAMES = ("SHOP", "BILLING", "AUDITOR", "MALLORY", "NYC")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> tuple[Path, dict[str, Identity]]:
    directory = tmp_path_factory.mktemp("keys")
    identities = {}
    for name in NAMES:
        write_identity(Identity.generate(name), directory)
        identities[name] = load_identity(directory / f"{name}.key")
    return directory, identities


@pytest.fixture(scope="module")
def keyring(keys) -> Keyring:
    return Keyring(keys[0])


def ids(keys) -> dict[str, Identity]:
    return keys[1]


# ---------------------------------------------------------------------- the envelope
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=2000), quality=st.sampled_from([Quality.INTEGRITY, Quality.PRIVACY]))
def test_the_recipient_opens_what_was_sealed(keys, keyring, data, quality) -> None:
    shop, billing = ids(keys)["SHOP"], ids(keys)["BILLING"]
    sealed = seal(shop, quality, data, [keyring.get("BILLING"), keyring.get("AUDITOR")])
    assert is_protected(sealed)
    opened = open_envelope(sealed, keyring, billing)
    assert (opened.quality, opened.signer, opened.data) == (quality, "SHOP", data)
    if quality is Quality.PRIVACY and len(data) >= 16:
        # encrypted: the body is in no field of the envelope
        fields = msgpack.unpackb(sealed[len(MAGIC) :])
        assert all(data not in value for value in fields.values() if isinstance(value, bytes))


def test_privacy_is_unreadable_to_anyone_else(keys, keyring) -> None:
    sealed = seal(ids(keys)["SHOP"], Quality.PRIVACY, b"card 4111", [keyring.get("BILLING")])
    for reader in (ids(keys)["MALLORY"], ids(keys)["SHOP"], None):
        with pytest.raises(ProtectionError, match="not a recipient"):
            open_envelope(sealed, keyring, reader)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    quality=st.sampled_from([Quality.INTEGRITY, Quality.PRIVACY]),
    position=st.floats(min_value=0, max_value=1, exclude_max=True),
    flip=st.integers(min_value=1, max_value=255),
)
def test_a_changed_byte_never_opens_to_other_content(keys, keyring, quality, position, flip):
    """Any single byte changed anywhere in the envelope: open refuses it, or (a byte of
    another recipient's wrapped key) still yields exactly what was signed."""
    shop, billing = ids(keys)["SHOP"], ids(keys)["BILLING"]
    recipients = [keyring.get("BILLING"), keyring.get("AUDITOR")]
    sealed = bytearray(seal(shop, quality, b"pay 100 to BOB", recipients))
    sealed[int(position * len(sealed))] ^= flip
    try:
        opened = open_envelope(bytes(sealed), keyring, billing)
    except ProtectionError:
        return
    assert (opened.signer, opened.data, opened.quality) == ("SHOP", b"pay 100 to BOB", quality)


def test_a_forged_signer_does_not_verify(keys, keyring) -> None:
    """MALLORY signs with her key but names SHOP as the signer."""
    forged = Identity("SHOP", ids(keys)["MALLORY"].signing_key, ids(keys)["MALLORY"].decrypt_key)
    for quality in (Quality.INTEGRITY, Quality.PRIVACY):
        sealed = seal(forged, quality, b"pay 100 to MALLORY", [keyring.get("BILLING")])
        with pytest.raises(ProtectionError, match="does not verify"):
            open_envelope(sealed, keyring, ids(keys)["BILLING"])


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300))
def test_garbage_after_the_header_is_refused_cleanly(keyring, body) -> None:
    with pytest.raises(ProtectionError):
        open_envelope(b"MRSPDMQ1" + body, keyring, None)


# ---------------------------------------------------------------------- a get's check
def protection(keys, tmp_path: Path, reader: str, policies: str) -> Protection:
    path = tmp_path / "protection.toml"
    path.write_text(f'keys_dir = "{keys[0]}"\n{policies}')
    return Protection(load_policies(path), ids(keys)[reader])


POLICIES = """
[[policy]]
queue = "1.10"
protection = "privacy"
signers = ["SHOP"]
recipients = ["BILLING"]
[[policy]]
queue = "1.11"
protection = "integrity"
[[policy]]
queue = "1.12"
protection = "integrity"
tolerate = true
"""


def test_a_get_refuses_what_fails_the_policy(keys, keyring, tmp_path) -> None:
    billing = protection(keys, tmp_path, "BILLING", POLICIES)
    shop = protection(keys, tmp_path, "SHOP", POLICIES)
    mallory = protection(keys, tmp_path, "MALLORY", POLICIES)
    privacy, integrity, tolerant = Address(1, 10), Address(1, 11), Address(1, 12)
    # what a well-behaved putter sends opens
    assert billing.check(privacy, shop.seal_for("1.10", b"x", 1)).data == b"x"
    assert billing.check(integrity, mallory.seal_for("1.11", b"y", 1)).signer == "MALLORY"
    cases = {
        "unprotected": (privacy, b"plain"),
        "signed only, privacy required": (
            privacy,
            seal(ids(keys)["SHOP"], Quality.INTEGRITY, b"x"),
        ),
        "not a policy signer": (
            privacy,
            seal(ids(keys)["MALLORY"], Quality.PRIVACY, b"x", [keyring.get("BILLING")]),
        ),
        "unsigned on integrity": (integrity, b"plain"),
    }
    for queue, body in cases.values():
        with pytest.raises(ProtectionError):
            billing.check(queue, body)
    assert billing.check(tolerant, b"plain") is None  # tolerated: delivered as is
    assert billing.check(Address(1, 13), b"plain") is None  # no policy
    # a putter the policy does not name cannot put at all
    with pytest.raises(ProtectionRefused) as refused:
        mallory.seal_for("1.10", b"x", 1)
    assert refused.value.reason == MQRC_NOT_AUTHORIZED
    # already protected: never protected twice
    sealed = shop.seal_for("1.10", b"x", 1)
    assert shop.seal_for("1.10", sealed, 1) == sealed
    # a name it cannot resolve (no bus config): refused, not sent unprotected
    with pytest.raises(ProtectionRefused, match="cannot tell"):
        shop.seal_for("ORDERS", b"x", 1)


# ---------------------------------------------------------------------- the DLQ rules
def dlq(keys, keyring, *, identity: str | None, **policy) -> DeadLetterProtection:
    rule = Policy(Address(1, 96), **policy) if policy else None
    return DeadLetterProtection(rule, ids(keys)[identity] if identity else None, keyring)


def test_dead_letter_cases_of_the_channel_document(keys, keyring) -> None:
    protected = seal(ids(keys)["SHOP"], Quality.PRIVACY, b"secret", [keyring.get("BILLING")])
    plain = b"plain order"
    auditor = ["AUDITOR"]
    # no policy for the DLQ: placed as is, protected or not
    none = dlq(keys, keyring, identity="NYC")
    assert (none.place(protected), none.place(plain)) == (protected, plain)
    # a policy with the same name as the DLQ: it protects what it receives...
    policy = dlq(keys, keyring, identity="NYC", quality=Quality.PRIVACY, recipients=auditor)
    opened = open_envelope(policy.place(plain), keyring, ids(keys)["AUDITOR"])
    assert (opened.signer, opened.data) == ("NYC", plain)
    # ... but never protects twice
    assert policy.place(protected) == protected
    # tolerate off and the group does not protect: an unprotected message is refused
    strict = dlq(keys, keyring, identity=None, quality=Quality.INTEGRITY, tolerate=False)
    with pytest.raises(DeadLetterRefused, match="does not tolerate"):
        strict.place(plain)
    assert strict.place(protected) == protected
    tolerant = dlq(keys, keyring, identity=None, quality=Quality.INTEGRITY, tolerate=True)
    assert tolerant.place(plain) == plain
    # the policy does not permit the group's identity to protect: refused
    other = dlq(keys, keyring, identity="NYC", quality=Quality.INTEGRITY, signers=("SHOP",))
    with pytest.raises(DeadLetterRefused, match="does not let"):
        other.place(plain)


# ---------------------------------------------------------------------- files
@pytest.mark.parametrize(
    "text, problem",
    [
        ('[[policy]]\nqueue = "1.10"\nprotection = "secret"', "integrity"),
        ('[[policy]]\nqueue = "1.10"\nprotection = "privacy"', "needs recipients"),
        ('[[policy]]\nqueue = "ORDERS"\nprotection = "integrity"', "GROUP.QUEUE"),
        ('[[policy]]\nprotection = "integrity"', "queue: required"),
        ('[[policy]]\nqueue = "1.1"\nprotection = "integrity"\nsigners = "SHOP"', "list"),
        ('[[policy]]\nqueue = "1.1"\nprotection = "integrity"\nsigner = ["A"]', "unknown key"),
        ("[[group_key]]\ngroup = 1", "key: required"),
        ("keys_dir = [", "not valid TOML"),
    ],
)
def test_a_bad_policy_file_says_where(tmp_path, text, problem) -> None:
    path = tmp_path / "protection.toml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=problem) as error:
        load_policies(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_private_keys_are_owner_only_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        write_identity(Identity.generate("APP"), tmp_path / "keys")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "keys" / "APP.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    with pytest.raises(PolicyError, match="exists"):
        write_identity(Identity.generate("APP"), tmp_path / "keys")


def test_mrs_keys_new(tmp_path) -> None:
    command = [sys.executable, "-m", "mrs", "keys", "new", "SHOP", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    identity = load_identity(tmp_path / "SHOP.key")
    assert Keyring(tmp_path).get("SHOP").verify_key.public_bytes_raw() == (
        identity.signing_key.public_key().public_bytes_raw()
    )
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "exists" in again.stderr


def test_a_forged_protection_header_is_dropped(keys, tmp_path) -> None:
    """Only the library sets `mrs_protection`, after verifying; a sender's own is dropped."""
    billing = protection(keys, tmp_path, "BILLING", POLICIES)
    forged = {"mrs_protection": {"signer": "SHOP", "quality": "privacy"}, "app": 1}
    for queue in ("1.13", "1.12"):  # no policy; a tolerated unprotected message
        message = Message(b"plain", 7, Address(1, 20), Address.parse(queue), headers=forged)
        assert billing.open(message).headers == {"app": 1}


# ---------------------------------------------------------------------- mutation fuzz
FUZZ_INPUTS = 3000


def test_mutated_envelopes_open_or_raise_protection_error(keys, keyring) -> None:
    """Byte-level mutations (mrs.testing.fuzz_targets' mutator) of real envelopes: each opens
    to exactly what was sealed or raises ProtectionError, never anything else."""
    shop, billing = ids(keys)["SHOP"], ids(keys)["BILLING"]
    recipients = [keyring.get("BILLING"), keyring.get("AUDITOR")]
    samples = [seal(shop, q, b"pay 100 to BOB", recipients) for q in Quality if q.rank]
    rng = random.Random(15)
    opened_count = 0
    for _ in range(FUZZ_INPUTS):
        data = mutate(rng.choice(samples), rng, samples)
        try:
            opened = open_envelope(data, keyring, billing)
        except ProtectionError:
            continue
        opened_count += 1
        assert (opened.signer, opened.data) == ("SHOP", b"pay 100 to BOB")
    assert opened_count < FUZZ_INPUTS  # the mutations did reach the checks


def test_mutated_policy_files_load_or_raise_policy_error(tmp_path) -> None:
    sample = (
        b'keys_dir = "keys"\n[[policy]]\nqueue = "1.10"\nprotection = "privacy"\n'
        b'signers = ["SHOP"]\nrecipients = ["BILLING"]\ntolerate = false\n'
        b'[[group_key]]\ngroup = 1\nkey = "keys/NYC.key"\n'
    )
    rng = random.Random(15)
    loaded = 0
    for _ in range(FUZZ_INPUTS):
        data = mutate(sample, rng, [sample])
        try:
            parse_policies(data.decode("utf-8", errors="replace"), tmp_path / "p.toml")
        except PolicyError:
            continue
        loaded += 1
    assert 0 < loaded < FUZZ_INPUTS


def test_a_private_key_others_can_read_is_refused(tmp_path) -> None:
    _, public_path = write_identity(Identity.generate("APP"), tmp_path)
    private_path = tmp_path / "APP.key"
    private_path.chmod(0o644)
    with pytest.raises(PolicyError, match="chmod 600"):
        load_identity(private_path)
    private_path.chmod(0o600)
    assert load_identity(private_path).name == "APP"


def test_policies_name_queues_and_groups_with_the_bus_config(keys, tmp_path) -> None:
    (tmp_path / "bus.toml").write_text(
        '[[group]]\nid = 3\nname = "LDN"\nlisten = "127.0.0.1:0"\ndata_dir = "g3"\n'
        '[[group.queue]]\nid = 20\nname = "SHIPPING"\n'
    )
    (tmp_path / "protection.toml").write_text(
        f'keys_dir = "{keys[0]}"\n[[policy]]\nqueue = "LDN.SHIPPING"\nprotection = "integrity"\n'
        '[[group_key]]\ngroup = "LDN"\nkey = "keys/LDN.key"\n'
    )
    shop = Protection.load(
        tmp_path / "protection.toml", keys[0] / "SHOP.key", bus_config=tmp_path / "bus.toml"
    )
    assert set(shop.policies.policies) == {Address(3, 20)}
    assert shop.policies.group_keys == {3: tmp_path / "keys" / "LDN.key"}
    for target in ("LDN.SHIPPING", "3.20", "SHIPPING", Address(3, 20)):
        assert is_protected(shop.seal_for(target, b"x", default_group=3))
    assert shop.seal_for("LDN.20", b"x", default_group=1) != b"x"
    assert shop.seal_for("3.21", b"x", default_group=3) == b"x"  # no policy
    with pytest.raises(PolicyError, match="GROUP.QUEUE"):
        Protection.load(tmp_path / "protection.toml", keys[0] / "SHOP.key")  # no bus config
