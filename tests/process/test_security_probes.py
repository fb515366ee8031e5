"""Attacks on authentication, TLS and message protection against real `mrs serve`
processes, and what each is now answered. Each test names the defect it found."""

from __future__ import annotations

import datetime
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from clients import (
    ConnectionLost,
    DeliveryMode,
    NoMoreMessages,
    Protection,
    ProtectionRefused,
    TlsRefused,
    connect,
    tls_context,
)
from mrs.config.bus import load_config
from mrs.protection.keys import Identity, write_identity
from mrs.tools import certs as certs_tool
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config
from sim.proxy import FaultProxy
from tests.auth_helpers import SecureBus, creds
from tests.process.test_protection_bus import (  # noqa: F401
    QUEUES,
    app,
    dump,
    keys,
    put_in_order,
    secure_protected_bus,
    start_group,
    with_protection,
    write_policies,
)
from tests.process.test_tls import TlsBus, mrs, write_bus

MODE = DeliveryMode


def dead_letters_of(directory, seq: int) -> list[dict]:
    """The DLJ records (`mrs dump dlj --json`) of the refused message `seq`."""
    records = [json.loads(line) for line in dump(directory, "dlj").splitlines()]
    return [
        record
        for record in records
        if record["headers"]["dead_letter_header"].get("original_seq") == seq
    ]


async def refuse_and_leave(address: str, reader: Protection) -> int:
    """Get the good message and the refused one of 1.15 (in order), and leave without
    confirming the good one: the refused one cannot be confirmed before it (BADSEQ),
    so it stays on the queue for the next reader. The refused seq."""
    async with connect(address, "1.15", protection=reader) as q:
        first = await q.get(timeout=5)
        assert first.body == b"good-1"
        with pytest.raises(ProtectionRefused) as refused:
            await q.get(timeout=5)
        assert refused.value.dead_lettered
        assert refused.value.seq is not None
        return refused.value.seq


async def test_a_second_refusal_by_another_reader_is_marked_a_possible_duplicate(
    start_group,  # noqa: F811
    keys,  # noqa: F811
) -> None:
    """Defect: with a memory DLQ the refused message goes to the DLJ, where the DLQ
    put's idempotency key does not dedupe. A reader that left before confirming
    (here: an in-order queue whose older message it did not confirm) left it to the
    next reader, who refused it again: two DLJ copies, the second unmarked, and
    `mrs jplay` replayed both as originals. Now the copy a reader makes of a message
    it got POSSDUPL carries `possible_duplicate`, so it is delivered POSSDUPL."""
    group, directory = start_group()
    await put_in_order(group.address, app(directory, keys, "SHOP"), [b"good-1", b"bad-2"])
    billing = app(directory, keys, "BILLING")
    seq = await refuse_and_leave(group.address, billing)
    assert await refuse_and_leave(group.address, billing) == seq
    copies = dead_letters_of(directory, seq)
    marked = [bool(copy["headers"].get("possible_duplicate")) for copy in copies]
    assert marked.count(False) == 1, copies
    # What a user sees: a replay of the DLJ hands the second copy over POSSDUPL.
    replay = [sys.executable, "-m", "mrs", "jplay", "dlj", "--config", str(directory / "bus.toml")]
    replay += ["--group", "1", "--address", group.address, "--as", "SENDER", "--to", "1.14"]
    done = subprocess.run(replay, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    async with connect(group.address, "1.14") as plain:
        got = [await plain.get(timeout=5) for _copy in copies]
    assert sorted(message.delivery_status.name for message in got) == ["CONFIRMREQ", "POSSDUPL"]


def expired_group_certificate(config: Path, group_id: int) -> None:
    """Replace group `group_id`'s certificate (made by `mrs certs --apply`) by one of
    the same CA and names whose validity ended two days ago."""
    out = config.parent / "certs"
    ca_cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
        days=certs_tool.VALID_DAYS + 2
    )
    names = certs_tool._group_names(load_config(config).group(group_id))
    certs_tool._leaf(out, f"group-{group_id}", names, ca_cert, ca_key, long_ago)


def test_a_group_with_an_expired_certificate_does_not_start(tmp_path) -> None:
    """Defect: a group whose certificate had expired started and served; every client
    and linked group was then refused ("certificate has expired"), and the group's
    only word was an INFO line per handshake that seemed to blame the peer. Now
    `mrs serve` stops with one config-error line naming the file, while the offline
    tools (which never use the certificate) still read the config."""
    config = write_bus(tmp_path / "bus")
    out = tmp_path / "bus" / "certs"
    made = mrs("certs", "--config", str(config), "--out", str(out), "--apply")
    assert made.returncode == 0, made.stderr
    expired_group_certificate(config, 1)
    command = [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"]
    try:
        served = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("mrs serve started and served with an expired certificate")
    assert served.returncode == 2, served.stderr
    assert served.stderr.count("\n") == 1 and "Traceback" not in served.stderr, served.stderr
    assert "group-1.pem expired on" in served.stderr and "mrs certs --force" in served.stderr
    assert load_config(config).group(1).tls is not None  # `mrs dump` etc. still load it


async def test_a_tls_client_on_a_plaintext_port_gets_one_clear_line_each_side(tmp_path) -> None:
    """Defect: a client with TLS reaching a group without [group.tls] was told
    "wrong version number" (OpenSSL's words), and the group logged "auth frame of
    369295618 bytes": neither said that one side speaks TLS and the other does not.
    Now each says so in one line, at once, and the group serves the next client."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    out = tmp_path / "certs"
    made = mrs("certs", "--config", str(bus.config_path), "--out", str(out))
    assert made.returncode == 0, made.stderr
    tls = tls_context(ca=out / "ca.pem", cert=out / "client.pem", key=out / "client.key")
    bus.start()
    try:
        with trio.fail_after(10):
            with pytest.raises(TlsRefused, match="does not speak TLS"):
                async with connect(bus.address(1), "1.10", credentials=creds("consumer"), tls=tls):
                    pass
            async with connect(bus.address(1), "1.10", credentials=creds("consumer")) as plain:
                assert await plain.pending(["1.10"]) == [0]
        assert "a TLS handshake on a port without TLS" in bus.log(1)
    finally:
        bus.stop()


async def test_a_rotated_public_key_applies_to_a_reader_that_runs_on(tmp_path) -> None:
    """Defect: the keyring read each NAME.pub once per process. After SHOP rotated its
    key (a new NAME.key, the new NAME.pub copied over the old), a reader that was
    running verified SHOP's new messages with the old key and refused every one of
    them to the DLQ ("does not verify") until it was restarted. Now a changed
    NAME.pub is read again at the next message."""
    own_keys = tmp_path / "keys"
    for name in ("SHOP", "BILLING"):
        write_identity(Identity.generate(name), own_keys)
    config = write_single_group_config(tmp_path / "bus", queues=QUEUES)
    with_protection(config)
    write_policies(config.parent, own_keys)
    group = GroupProcess(config, 1)
    group.start()
    try:
        async with connect(
            group.address, "1.11", protection=app(config.parent, own_keys, "BILLING")
        ) as reader:
            for body in (b"before the rotation", b"after the rotation"):
                shop = app(config.parent, own_keys, "SHOP")
                async with connect(group.address, "SENDER", protection=shop) as sender:
                    await sender.put(body, target="1.11", delivery=MODE.WF_DQF)
                message = await reader.get(timeout=5)
                assert (message.body, message.headers["mrs_protection"]["signer"]) == (body, "SHOP")
                await reader.confirm(message.seq)
                for old in ("SHOP.key", "SHOP.pub"):  # `mrs keys new SHOP` after removing them
                    (own_keys / old).unlink()
                write_identity(Identity.generate("SHOP"), own_keys)
    finally:
        group.terminate()


async def test_a_refused_memory_message_that_cannot_be_moved_is_not_said_to_stay(
    tmp_path,
    keys,  # noqa: F811
) -> None:
    """Defect: a nonrecoverable message is gone from its queue once got (it needs no
    confirm). When the reader could not move it to the DLQ (here: no 'dlq' right),
    ProtectionRefused still said it was "left on the queue, and refused again on
    every get", and the next get found nothing. Now it says it was discarded."""
    bus = secure_protected_bus(tmp_path / "bus", keys)
    try:
        async with connect(bus.address(1), "1.13", credentials=creds("producer")) as plain:
            await plain.put(b"unsigned order", target="1.10", delivery=MODE.WF_MEM)
        billing = app(bus.directory, keys, "BILLING")
        async with connect(
            bus.address(1), "1.10", credentials=creds("consumer"), protection=billing
        ) as reader:
            with pytest.raises(ProtectionRefused) as refused:
                await reader.get(timeout=5)
            assert not refused.value.dead_lettered
            text = str(refused.value)
            assert "left on the queue" not in text and "discarded" in text, text
            assert "needs the admin right 'dlq'" in text, text
            with pytest.raises(NoMoreMessages):
                await reader.get(timeout=0)
    finally:
        bus.stop()


def test_a_link_secret_copied_readable_by_others_is_narrowed(tmp_path) -> None:
    """Defect: `mrs creds` writes the credentials file and link secrets 0600, but the
    docs have the operator copy them to each group's host, and a `cp` under umask
    022 leaves them 0644: every local user could read the secret that proves the
    group's identity to its peers, and the group said nothing. Now the group narrows
    them to 0600 when it loads them, as it does its journals, and logs that it did."""
    bus = SecureBus(tmp_path / "bus")
    secret = bus.directory / "secrets" / "group-1.secret"
    credentials = bus.directory / "creds.toml"
    for path in (secret, credentials):
        path.chmod(0o644)
    bus.processes[1].start()
    try:
        assert [stat.S_IMODE(p.stat().st_mode) for p in (secret, credentials)] == [0o600] * 2
        log = bus.log(1)
        assert f"link secret {secret} was readable by others (0644)" in log
        assert f"credentials file {credentials} was readable by others (0644)" in log
    finally:
        bus.stop()


async def test_a_client_certificate_of_another_ca_is_told_what_the_group_refused(
    tmp_path,
) -> None:
    """Defect: a client whose certificate was issued by another CA than the group's
    was told "tlsv1 alert unknown ca", and one whose certificate had expired
    "sslv3 alert certificate expired": OpenSSL's alert names, which do not say which
    side refused what. Now the reason says it (`the peer does not trust the CA of
    our certificate`), OpenSSL's words kept beside it."""
    bus = TlsBus(tmp_path / "bus")
    other = write_bus(tmp_path / "other")
    made = mrs("certs", "--config", str(other), "--out", str(tmp_path / "other" / "certs"))
    assert made.returncode == 0, made.stderr
    foreign = tmp_path / "other" / "certs"
    tls = tls_context(
        ca=bus.certs / "ca.pem", cert=foreign / "client.pem", key=foreign / "client.key"
    )
    bus.start()
    try:
        with trio.fail_after(10):
            with pytest.raises(
                TlsRefused, match="the peer does not trust the CA of our certificate"
            ):
                async with connect(bus.address(1), "1.10", tls=tls, reconnect=None):
                    pass
            async with connect(bus.address(1), "1.10", tls=bus.client_tls()) as client:
                assert await client.pending(["1.10"]) == [0]
    finally:
        bus.stop()


async def test_a_reconnect_after_a_refusal_does_not_jam_an_in_order_queue(
    start_group,  # noqa: F811
    keys,  # noqa: F811
) -> None:
    """Defect: a refused message an in-order queue would not let be confirmed yet is
    held to be confirmed after the older ones. When the connection dropped, it came
    again (POSSDUPL) and was refused and held again: held twice. The second confirm
    of it answered BADSEQ (confirmed already), which read as "older ones first", so
    it stayed at the head of the held list for good, and the next refused message
    behind it was never confirmed: the application's own confirms of every later
    message were answered BADSEQ ("confirm N before ..."). Now a seq is held once."""
    group, directory = start_group()
    await put_in_order(
        group.address,
        app(directory, keys, "SHOP"),
        [b"good-1", b"bad-2", b"good-3", b"bad-4", b"good-5"],
    )
    port = int(group.address.rsplit(":", 1)[1])
    proxy = FaultProxy(free_port(), port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        billing = app(directory, keys, "BILLING")
        address = f"127.0.0.1:{proxy.listen_port}"
        async with connect(address, "1.15", protection=billing) as reader:
            assert (await reader.get(timeout=5)).body == b"good-1"
            with pytest.raises(ProtectionRefused):
                await reader.get(timeout=5)
            proxy.cut()  # the connection drops; both come again after the reconnect
            proxy.heal()
            try:  # a get can learn of the drop (ConnectionLost) before the reconnect
                first = await reader.get(timeout=10)
            except ConnectionLost:
                with trio.fail_after(10):
                    await reader.wait_connected()
                first = await reader.get(timeout=10)
            assert first.body == b"good-1"
            with pytest.raises(ProtectionRefused):
                await reader.get(timeout=5)
            for body in (b"good-1", b"good-3", b"good-5"):
                message = first if body == b"good-1" else await reader.get(timeout=5)
                assert message.body == body
                if body == b"good-3":
                    with pytest.raises(ProtectionRefused):  # bad-4, held in turn
                        await reader.get(timeout=5)
                await reader.confirm(message.seq)  # BADSEQ for good-5 before
        nursery.cancel_scope.cancel()
