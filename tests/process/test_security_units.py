"""The pure parts of mrs.security: SCRAM arithmetic, the permission rules, the
credentials file format and the auth frame decoder (property tests)."""

from __future__ import annotations

import os
import stat

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.config.auth import parse_auth
from mrs.model import Status
from mrs.security import creds as store
from mrs.security import scram
from mrs.security.handshake import AuthFailed, FrameReader, auth_message
from mrs.security.permissions import (
    ADMIN_RIGHTS,
    Permissions,
    PutFacts,
    may_attach,
    may_confirm,
    may_put,
    parse_permissions,
)

ITERATIONS = scram.ITERATIONS_MIN
passwords = st.text(min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(password=passwords, other=passwords, nonce=st.binary(min_size=1, max_size=32))
def test_a_proof_verifies_only_with_the_right_password(password, other, nonce) -> None:
    verifier = scram.make_verifier(password, ITERATIONS)
    message = auth_message("app", nonce, b"server", verifier.salt, ITERATIONS, 1)
    salted = scram.salted_password(password, verifier.salt, ITERATIONS)
    assert scram.proof_valid(verifier, message, scram.client_proof(salted, message))
    assert not scram.proof_valid(verifier, message + b"x", scram.client_proof(salted, message))
    if other != password:
        wrong = scram.salted_password(other, verifier.salt, ITERATIONS)
        assert not scram.proof_valid(verifier, message, scram.client_proof(wrong, message))
    signature = scram.server_signature(verifier.server_key, message)
    assert scram.signature_valid(scram.server_key(salted), message, signature)


def test_the_verifier_is_not_the_password_nor_a_key_that_logs_in() -> None:
    """StoredKey is H(ClientKey): used as a proof it fails."""
    verifier = scram.make_verifier("hunter2", ITERATIONS)
    message = b"m"
    assert not scram.proof_valid(verifier, message, verifier.stored_key)
    assert not scram.proof_valid(verifier, message, verifier.server_key)
    assert b"hunter2" not in verifier.salt + verifier.stored_key + verifier.server_key


def test_two_verifiers_of_one_password_differ_by_salt() -> None:
    first, second = (scram.make_verifier("same", ITERATIONS) for _ in range(2))
    assert first.salt != second.salt and first.stored_key != second.stored_key


patterns = st.sampled_from(["1.10", "1.*", "*", "2.*", "ORDERS", "*.10", "1.1?"])


@given(
    attach=st.lists(patterns, max_size=3),
    group=st.integers(1, 3),
    queue=st.integers(1, 99),
)
def test_attach_is_allowed_exactly_when_a_pattern_matches(attach, group, queue) -> None:
    import fnmatch

    perms = Permissions(attach=tuple(attach))
    address = f"{group}.{queue}"
    expected = any(fnmatch.fnmatchcase(address, pattern) for pattern in attach)
    assert (may_attach(perms, address, None, is_dlq=False) is None) == expected


@given(admin=st.sets(st.sampled_from(sorted(ADMIN_RIGHTS))), put=st.lists(patterns, max_size=3))
def test_dead_letter_puts_need_dlq_whatever_the_put_grants(admin, put) -> None:
    perms = Permissions(put=tuple(put), admin=frozenset(admin))
    for facts in (
        PutFacts("1.96", "DLQ", True, False, False, None),
        PutFacts("1.10", None, False, True, False, None),
        PutFacts("1.10", None, False, False, True, None),
    ):
        allowed = may_put(perms, facts) is None
        assert allowed == ("dlq" in admin and (facts.target_is_dlq or "1.10" in _matches(put)))


def _matches(put):
    import fnmatch

    return {"1.10"} if any(fnmatch.fnmatchcase("1.10", p) for p in put) else set()


def test_nothing_is_granted_by_default() -> None:
    perms = Permissions()
    assert may_attach(perms, "1.10", "ORDERS", False) is not None
    assert may_confirm(perms, "1.10", "ORDERS", False) is not None
    assert may_put(perms, PutFacts("1.10", None, False, False, False, None)) is not None
    assert "not granted" in may_attach(perms, "1.10", None, False)


def test_grants_match_queue_names_too() -> None:
    perms = Permissions(attach=("ORDERS",))
    assert may_attach(perms, "1.10", "ORDERS", False) is None
    assert may_attach(perms, "1.11", "OTHER", False) is not None


@given(
    raw=st.dictionaries(
        st.sampled_from(["attach", "put", "confirm", "admin"]),
        st.one_of(st.lists(st.text(max_size=8), max_size=3), st.integers(), st.text()),
    )
)
def test_malformed_grants_are_a_sentence_never_an_exception(raw) -> None:
    result = parse_permissions(raw)
    assert isinstance(result, Permissions | str)


@settings(max_examples=20, deadline=None)
@given(
    names=st.lists(st.from_regex(r"[A-Za-z0-9_.\-]{1,20}", fullmatch=True), unique=True),
    attach=st.lists(patterns, max_size=2),
    admin=st.sets(st.sampled_from(sorted(ADMIN_RIGHTS))),
)
def test_the_credentials_file_round_trips(tmp_path_factory, names, attach, admin) -> None:
    path = tmp_path_factory.mktemp("creds") / "creds.toml"
    creds = store.Credentials()
    grants = Permissions(attach=tuple(attach), admin=frozenset(admin))
    for name in names:
        store.add(creds, name, "Tr0ub4dor&3-unique", grants, ITERATIONS)
    store.save(path, creds)
    assert store.load(path).principals == creds.principals
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "Tr0ub4dor" not in path.read_text()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[principal.a]\nsalt = 1\n", "unknown keys"),
        ("not toml [", "not valid TOML"),
        ("[other]\n", "unknown keys"),
        ('[principal."bad name"]\n', "principal name"),
    ],
)
def test_a_broken_credentials_file_is_one_clear_error(tmp_path, text, problem) -> None:
    path = tmp_path / "creds.toml"
    path.write_text(text)
    with pytest.raises(store.CredsError, match=problem):
        store.load(path)


def test_rotate_keeps_grants_and_changes_the_salt() -> None:
    creds = store.Credentials()
    store.add(creds, "app", "one", Permissions(attach=("1.10",)), ITERATIONS)
    before = creds.principals["app"]
    store.rotate(creds, "app", "two", ITERATIONS)
    after = creds.principals["app"]
    assert after.permissions == before.permissions and after.verifier.salt != before.verifier.salt
    with pytest.raises(store.CredsError):
        store.add(creds, "app", "x", Permissions(), ITERATIONS)
    store.remove(creds, "app")
    with pytest.raises(store.CredsError):
        store.remove(creds, "app")


def test_the_auth_table_parses_or_names_the_bad_key(tmp_path) -> None:
    assert parse_auth(None, tmp_path) is None
    assert parse_auth({"enabled": False}, tmp_path) is None
    config = parse_auth({"credentials": "c.toml", "link_secrets": "s"}, tmp_path)
    assert config.credentials_path == tmp_path / "c.toml"
    assert config.link_secret_path(3) == tmp_path / "s" / "group-3.secret"
    assert parse_auth({"credentials": "c.toml"}, tmp_path)[0] == "link_secrets"
    assert parse_auth({"bogus": 1}, tmp_path)[0] == "bogus"


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
async def test_any_bytes_decode_to_a_frame_or_an_auth_failure(data) -> None:
    """The server's first read of an unauthenticated peer: junk never escapes as
    anything but AuthFailed."""
    sender, receiver = trio.testing.memory_stream_pair()
    await sender.send_all(data)
    await sender.aclose()
    reader = FrameReader(receiver)
    try:
        with trio.fail_after(5):
            await reader.frame()
    except AuthFailed as failed:
        assert isinstance(failed.status, Status)


def _gate(tmp_path, grants: Permissions):
    from mrs.config.bus import parse_config
    from mrs.security.authority import Authority
    from mrs.security.gate import Gate

    creds = store.Credentials()
    store.add(creds, "app", "pw", grants, ITERATIONS)
    store.save(tmp_path / "creds.toml", creds)
    text = (
        '[[group]]\nid = 1\nname = "A"\nlisten = "127.0.0.1:0"\ndata_dir = "g"\n'
        '[[group.queue]]\nid = 10\nname = "IN"\n'
        '[auth]\ncredentials = "creds.toml"\nlink_secrets = "s"\n'
    )
    bus = parse_config(text, tmp_path / "bus.toml")
    authority = Authority(bus.auth, 1, ())
    return authority, Gate(authority, bus, 1)


class _Session:
    principal = "app"
    peer = "127.0.0.1:1"
    attached = None


def _put(target: str):
    from mrs import protocol as wire

    return wire.Put(1, target, b"x", 26, 0, 0, 0, 0, 0, b"", "", None)


def test_a_repeated_denial_is_logged_once_a_second_not_once_a_request(tmp_path, caplog) -> None:
    from mrs.core.delivery import Refused

    _, gate = _gate(tmp_path, Permissions(put=("1.10",)))
    for _ in range(100):
        with pytest.raises(Refused) as refused:
            gate.check(_Session, _put("1.96"))
        assert refused.value.status == Status.NOTAUTHORIZED
    lines = [r.getMessage() for r in caplog.records if r.name == "mrs.security"]
    assert 1 <= len(lines) <= 3 and "denied Put from 'app'" in lines[0]
    assert gate.denied == 100


def test_remembered_answers_are_forgotten_when_the_credentials_reload(tmp_path) -> None:
    from mrs.core.delivery import Refused

    authority, gate = _gate(tmp_path, Permissions(put=("1.10",)))
    gate.check(_Session, _put("1.10"))  # allowed, and remembered
    creds = store.load(tmp_path / "creds.toml")
    store.grant(creds, "app", Permissions())
    store.save(tmp_path / "creds.toml", creds)
    assert authority.reload("test")
    with pytest.raises(Refused):
        gate.check(_Session, _put("1.10"))


def test_creds_command_mistakes_are_one_line(tmp_path, capsys) -> None:
    from mrs.tools.cli import main

    missing = tmp_path / "nothing.toml"
    assert main(["creds", "rotate", "app", "--file", str(missing), "--generate"]) != 0
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "does not exist" in error and "Traceback" not in error
    assert main(["creds", "add", "bad name", "--file", str(missing), "--generate"]) != 0
    assert "principal name" in capsys.readouterr().err


def test_creds_generate_prints_no_password_for_a_command_that_fails(tmp_path, capsys) -> None:
    """A printed password is one the operator will hand out: print it only once the
    command is sure to succeed."""
    from mrs.tools.cli import main

    path = str(tmp_path / "creds.toml")
    assert main(["creds", "add", "app", "--file", path, "--generate", "--iterations", "4096"]) == 0
    assert capsys.readouterr().out.strip()  # the new principal's password, once
    assert main(["creds", "add", "app", "--file", path, "--generate"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and "exists" in printed.err
    assert main(["creds", "rotate", "nobody", "--file", path, "--generate"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and "no principal 'nobody'" in printed.err
    assert main(["creds", "add", "bad name", "--file", path, "--generate"]) == 2
    assert capsys.readouterr().out == ""


def test_an_output_that_exists_is_the_same_exit_status_everywhere(tmp_path, capsys) -> None:
    from mrs.tools.cli import main

    config = tmp_path / "bus.toml"
    config.write_text(
        '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:7001"\ndata_dir = "g"\n'
    )
    certs = ["certs", "--config", str(config), "--out", str(tmp_path / "certs")]
    keys = ["keys", "new", "SHOP", "--out", str(tmp_path / "keys")]
    creds = ["creds", "add", "app", "--file", str(tmp_path / "c.toml"), "--generate"]
    for command in (certs, keys, creds):
        assert main(command) == 0
        assert main(command) == 2, command
        assert "exists" in capsys.readouterr().err
