"""End-to-end message protection against real `mrs serve` processes: a protected message
is readable by its receiver and by no one else (not `mrs dump`, not the journal file,
not the audit scan); an unsigned or tampered message is refused to the receiver and
moved to the DLQ (or DLJ); and each dead-letter case of the AMS channel document
(shared/reference/undelivered-messages-channels.txt), the single-group DLQ rules on
the in-process bus (sim/membus.py: the same server code, no process to start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import (
    DeliveryMode,
    ForceJrn,
    NoMoreMessages,
    Protection,
    ProtectionRefused,
    Status,
    Uma,
    connect,
    connect_sync,
)
from journals import Journal, JournalStore
from mrs.audit import scan
from mrs.config.bus import load_config
from mrs.protection import is_protected
from mrs.protection.envelope import open_envelope
from mrs.protection.errors import MQRC_SECURITY_ERROR
from mrs.protection.keys import Identity, Keyring, load_identity, write_identity
from sim.bus import LinkedBus
from sim.membus import MemoryBus, MemoryGroup
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config

MODE = DeliveryMode
IDENTITIES = ("SHOP", "BILLING", "AUDITOR", "NYC")
SECRET = b"card 4111-1111-1111-1111 exp 12/29"
QUEUES = """
[[group.queue]]
id = 10
name = "PAYMENTS"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "SIGNED"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 14
name = "PLAIN"
[[group.queue]]
id = 15
name = "IN_ORDER"
confirm = "explicit-in-order"
"""
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
queue = "1.15"
protection = "integrity"
[[policy]]
queue = "1.50"
protection = "privacy"
recipients = ["BILLING"]
[[policy]]
queue = "2.10"
protection = "privacy"
recipients = ["BILLING"]
[[policy]]
queue = "2.50"
protection = "privacy"
recipients = ["BILLING"]
"""
NYC_KEY = '[[group_key]]\ngroup = 1\nkey = "{keys}/NYC.key"\n'


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("keys")
    for name in IDENTITIES:
        write_identity(Identity.generate(name), directory)
    return directory


def write_policies(directory: Path, keys: Path, extra: str = "") -> Path:
    path = directory / "protection.toml"
    path.write_text(f'keys_dir = "{keys}"\n' + POLICIES + extra.format(keys=keys))
    return path


def with_protection(config_path: Path) -> None:
    """Point the bus config at the policy file beside it (a top-level key)."""
    config_path.write_text('protection = "protection.toml"\n' + config_path.read_text())


def secure_protected_bus(directory: Path, keys: Path):
    """Group 1 under [auth] with the policy file, started (stop it with `stop()`)."""
    from tests.auth_helpers import SecureBus

    bus = SecureBus(directory, group_ids=(1,))
    with_protection(bus.config_path)
    write_policies(bus.directory, keys)
    bus.start()
    return bus


async def put_in_order(address: str, shop: Protection, bodies: list[bytes]) -> None:
    """Put `bodies` to the in-order integrity queue 1.15, those starting "bad" as
    they are (unsigned: they are refused on get), the others signed by SHOP."""
    async with connect(address, "SENDER", protection=shop) as sender:
        for body in bodies:
            protect = not body.startswith(b"bad")
            await sender.put(body, target="1.15", delivery=MODE.WF_DQF, protect=protect)


@pytest.fixture
def start_group(tmp_path, keys):
    """Start group 1 (QUEUES) with a policy file; `dlq_policy` is appended to it."""
    started: list[GroupProcess] = []

    def start(dlq_policy: str = "", group_extra: str = "") -> tuple[GroupProcess, Path]:
        directory = tmp_path / f"bus{len(started)}"
        config = write_single_group_config(directory, queues=QUEUES, group_extra=group_extra)
        with_protection(config)
        write_policies(directory, keys, dlq_policy)
        process = GroupProcess(config, 1)
        process.start()
        started.append(process)
        return process, directory

    yield start
    for process in started:
        process.terminate()


def app(directory: Path, keys: Path, name: str | None) -> Protection:
    identity = None if name is None else keys / f"{name}.key"
    return Protection.load(directory / "protection.toml", identity=identity)


def dump(directory: Path, journal: str) -> str:
    command = [sys.executable, "-m", "mrs", "dump", "--config", str(directory / "bus.toml")]
    command += ["--group", "1", journal, "--json", "--body-full"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


# ---------------------------------------------------------------------- privacy
async def test_a_protected_message_is_readable_by_its_receiver_only(start_group, keys) -> None:
    group, directory = start_group(group_extra="dead_letter_queue_recoverable = true")
    async with connect(group.address, "SENDER", protection=app(directory, keys, "SHOP")) as shop:
        psb = await shop.put(SECRET, target="1.10", delivery=MODE.WF_DQF)
        assert psb.delivery_status == Status.STORED
    # The group, its journal file and `mrs dump` hold an envelope, not the secret.
    records = [json.loads(line) for line in dump(directory, "dqf").splitlines()]
    assert [record["seq"] for record in records] == [psb.seq]
    body_text = records[0]["body"]
    assert SECRET.decode() not in body_text and SECRET.hex() not in body_text
    assert body_text.startswith("hex:" + b"MRSPDMQ1".hex())
    assert SECRET not in (directory / "g1" / "journals" / "data.mdb").read_bytes()

    # The receiver named by the policy reads it, and knows who signed it.
    async with connect(group.address, "1.10", protection=app(directory, keys, "BILLING")) as q:
        message = await q.get(timeout=5)
        assert (message.seq, message.body) == (psb.seq, SECRET)
        assert message.headers["mrs_protection"] == {"signer": "SHOP", "quality": "privacy"}
        await q.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
    # The audit trail (PCJ, what Spark reads) keeps the headers and the envelope only.
    pcj = dump(directory, "pcj")
    assert str(psb.seq) in pcj and SECRET.hex() not in pcj and SECRET.decode() not in pcj
    parts = scan.plan([(str(directory / "g1"), 1)], "pcj", settle_s=0)
    rows = [row for part in parts for b in scan.scan_batches(part) for row in b.to_pylist()]
    assert [(row["seq"], is_protected(row["body"])) for row in rows] == [(psb.seq, True)]
    assert SECRET not in rows[0]["body"]

    # Another application attached to the queue cannot read the next one.
    async with connect(group.address, "SENDER", protection=app(directory, keys, "SHOP")) as shop:
        second = await shop.put(SECRET, target="1.10", delivery=MODE.WF_DQF)
    async with connect(group.address, "1.10", protection=app(directory, keys, "AUDITOR")) as thief:
        with pytest.raises(ProtectionRefused, match="not a recipient") as refused:
            await thief.get(timeout=5)
        assert refused.value.seq == second.seq and refused.value.dead_lettered
    # Refused, it is on the (journaled) DLQ, still sealed, and survives a SIGKILL.
    address = await trio.to_thread.run_sync(group.restart)
    async with connect(address, "DLQ") as dead:
        moved = await dead.get(timeout=5)
    assert is_protected(moved.body) and SECRET not in moved.body
    header = moved.dead_letter_header
    assert (header["reason"], header["original_seq"]) == (MQRC_SECURITY_ERROR, second.seq)
    assert header["original_source"] == "1.13"


async def test_a_reader_without_an_identity_is_refused_before_it_takes_anything(
    start_group, keys
) -> None:
    """Before: a reader of a privacy queue started without `identity=` got each message,
    failed to open it, and moved it to the DLQ: it emptied the queue of messages meant
    for their recipients. Now its get is refused first and the message waits for them."""
    group, directory = start_group()
    async with connect(group.address, "SENDER", protection=app(directory, keys, "SHOP")) as shop:
        psb = await shop.put(SECRET, target="1.10", delivery=MODE.WF_DQF)
    async with connect(group.address, "1.10", protection=app(directory, keys, None)) as nobody:
        with pytest.raises(ProtectionRefused, match="no identity") as refused:
            await nobody.get(timeout=5)
        assert "nothing was taken" in str(refused.value) and not refused.value.dead_lettered
        with pytest.raises(ProtectionRefused, match="no identity"):
            await nobody.get_many(10, timeout=0)
    async with connect(group.address, "1.10", protection=app(directory, keys, "BILLING")) as q:
        message = await q.get(timeout=5)
        assert (message.seq, message.body, message.possible_duplicate) == (psb.seq, SECRET, False)
        await q.confirm(message.seq)


# ---------------------------------------------------------------------- integrity
async def test_unsigned_and_tampered_messages_are_refused_and_dead_lettered(
    start_group, keys
) -> None:
    group, directory = start_group()
    shop = app(directory, keys, "SHOP")
    signed = shop.seal_for("1.11", b"pay 10 to BOB", 1)
    tampered = signed.replace(b"pay 10 to BOB", b"pay 99 to EVE")
    assert tampered != signed
    async with connect(group.address, "SENDER") as plain:  # no protection: puts as is
        for body in (b"unsigned order", tampered):
            await plain.put(body, target="1.11", delivery=MODE.WF_DQF)
    async with connect(group.address, "SENDER", protection=shop) as sender:
        good = await sender.put(b"pay 20 to BOB", target="1.11", delivery=MODE.WF_DQF)

    async with connect(group.address, "1.11", protection=app(directory, keys, "BILLING")) as q:
        for problem in ("unprotected message", "does not verify"):
            with pytest.raises(ProtectionRefused, match=problem) as refused:
                await q.get(timeout=5)
            assert refused.value.status == Status.PROTECTION_ERROR
            assert refused.value.dead_lettered and refused.value.reason == MQRC_SECURITY_ERROR
        message = await q.get(timeout=5)
        assert (message.seq, message.body) == (good.seq, b"pay 20 to BOB")
        await q.confirm(message.seq)
    # Never silently delivered, never lost: the group's DLQ is memory only, so the
    # refused recoverable messages are in its DLJ (durable), as they were, with a
    # header a handler can match on, and gone from the queue (nothing redelivered).
    records = [json.loads(line) for line in dump(directory, "dlj").splitlines()]
    assert [r["body"] for r in records] == ["unsigned order", "hex:" + tampered.hex()]
    for record in records:
        header = record["headers"]["dead_letter_header"]
        assert (header["reason"], header["dest_q_mgr_name"], header["dest_q_name"]) == (
            MQRC_SECURITY_ERROR,
            "1",
            "11",
        )
    async with connect(group.address, "1.11", protection=app(directory, keys, "BILLING")) as q:
        with pytest.raises(NoMoreMessages):
            await q.get(timeout=0)


@pytest.mark.parametrize("confirming", ["confirm", "confirm_many"])
async def test_a_refusal_on_an_in_order_queue_does_not_jam_it(
    start_group, keys, confirming
) -> None:
    """On an explicit-in-order queue a refused message cannot be confirmed while an
    older one is unconfirmed. Before, the confirm's BADSEQ was only logged: the queue
    was jammed (every later confirm answered BADSEQ) and the next reader moved the
    message to the DLJ again. Now it is confirmed right after the older ones, also
    when the application confirms with `confirm_many` (which did not look at it)."""

    async def confirm(client, seqs: list[int]) -> None:
        if confirming == "confirm":
            for seq in seqs:
                await client.confirm(seq)
        else:
            assert await client.confirm_many(seqs) == [None] * len(seqs)

    group, directory = start_group()
    shop = app(directory, keys, "SHOP")
    await put_in_order(group.address, shop, [b"good-1", b"bad-2", b"good-3"])
    async with connect(group.address, "1.15", protection=app(directory, keys, "BILLING")) as q:
        first = await q.get(timeout=5)
        assert first.body == b"good-1"
        with pytest.raises(ProtectionRefused) as refused:
            await q.get(timeout=5)
        assert refused.value.dead_lettered
        third = await q.get(timeout=5)
        assert third.body == b"good-3"
        # the refused one in between: BADSEQ before, as it was never confirmed
        await confirm(q, [first.seq, third.seq])
    async with connect(group.address, "1.15", protection=app(directory, keys, "BILLING")) as q:
        with pytest.raises(NoMoreMessages):
            await q.get(timeout=0)
    records = [json.loads(line) for line in dump(directory, "dlj").splitlines()]
    assert [record["body"] for record in records] == ["bad-2"]


async def test_a_refusal_left_on_the_queue_says_why_it_could_not_be_moved(tmp_path, keys) -> None:
    """Under [auth], moving a refused message to the DLQ needs the reader's 'dlq' right:
    without it the message stays and is refused on every get, so the error must say
    what to grant."""
    from tests.auth_helpers import creds

    bus = secure_protected_bus(tmp_path / "bus", keys)
    try:
        async with connect(bus.address(1), "1.13", credentials=creds("producer")) as plain:
            await plain.put(b"unsigned order", target="1.10", delivery=MODE.WF_DQF)
        billing = app(bus.directory, keys, "BILLING")
        for _attempt in range(2):  # still there, refused the same way, after a reconnect
            async with connect(
                bus.address(1), "1.10", credentials=creds("consumer"), protection=billing
            ) as reader:
                with pytest.raises(ProtectionRefused) as refused:
                    await reader.get(timeout=5)
            assert not refused.value.dead_lettered
            assert "unprotected message" in str(refused.value)
            assert "needs the admin right 'dlq'" in str(refused.value), str(refused.value)
    finally:
        bus.stop()


# ---------------------------------------------------------------------- DLQ cases
DLQ_PRIVACY = '[[policy]]\nqueue = "1.96"\nprotection = "privacy"\nrecipients = ["AUDITOR"]\n'
DLQ_STRICT = '[[policy]]\nqueue = "1.96"\nprotection = "integrity"\ntolerate = false\n'
DLQ_SHOP_ONLY = (
    '[[policy]]\nqueue = "1.96"\nprotection = "integrity"\nsigners = ["SHOP"]\n' + NYC_KEY
)


@pytest.fixture
async def start_memory_group(tmp_path, keys, nursery):
    """Group 1 (QUEUES) with a policy file, in this trio run on the in-memory network
    and journals (sim/membus.py): the DLQ rules need no process of their own."""

    async def start(dlq_policy: str = "") -> MemoryGroup:
        directory = tmp_path / "membus"
        config = write_single_group_config(directory, queues=QUEUES)
        with_protection(config)
        write_policies(directory, keys, dlq_policy)
        memory = MemoryBus(load_config(config), nursery)
        await memory.start(1)
        return MemoryGroup(memory, 1, config)

    return start


async def dead_letter_both(group: MemoryGroup, keys: Path, delivery) -> dict:
    """A protected and an unprotected message to 1.50 (no such queue) with UMA DLQ:
    their PSBs, and what reached the DLQ (body by correlation id)."""
    outcome = {}
    shop = app(group.config_path.parent, keys, "SHOP")
    async with (
        group.connect("SENDER", protection=shop) as sender,
        group.connect("PLAIN") as plain,
    ):
        for name, client in (("protected", sender), ("plain", plain)):
            psb = await client.put(
                SECRET, target="1.50", delivery=delivery, uma=Uma.DLQ, correlation_id=name.encode()
            )
            outcome[name] = psb.uma_status
    async with group.connect("DLQ") as dead:
        while True:
            try:
                message = await dead.get(timeout=0)
            except NoMoreMessages:
                break
            assert message.dead_letter_header["reason"] == 2085  # in clear, always
            outcome[message.correlation_id.decode() + " body"] = message.body
    return outcome


def opened(body: bytes, keys: Path, reader: str):
    return open_envelope(body, Keyring(keys), load_identity(keys / f"{reader}.key"))


@pytest.mark.parametrize("delivery", [MODE.WF_DQF, MODE.WF_MEM], ids=["recoverable", "memory"])
async def test_dlq_without_a_policy_places_messages_as_they_are(
    start_memory_group, keys, delivery
) -> None:
    group = await start_memory_group()
    outcome = await dead_letter_both(group, keys, delivery)
    assert outcome["protected"] == outcome["plain"] == Status.DLQ_SUCCESS
    assert outcome["plain body"] == SECRET
    assert opened(outcome["protected body"], keys, "BILLING").signer == "SHOP"


async def test_dlq_with_a_policy_protects_what_it_receives_but_never_twice(
    start_memory_group, keys
) -> None:
    group = await start_memory_group(DLQ_PRIVACY + NYC_KEY)
    outcome = await dead_letter_both(group, keys, MODE.WF_DQF)
    assert outcome["protected"] == outcome["plain"] == Status.DLQ_SUCCESS
    now_sealed = opened(outcome["plain body"], keys, "AUDITOR")  # the DLQ's recipient
    assert (now_sealed.signer, now_sealed.data) == ("NYC", SECRET)  # the group protected it
    as_it_was = opened(outcome["protected body"], keys, "BILLING")  # not sealed again
    assert (as_it_was.signer, as_it_was.data) == ("SHOP", SECRET)


@pytest.mark.parametrize(
    "policy", [DLQ_STRICT, DLQ_SHOP_ONLY], ids=["tolerate-off", "group-not-permitted"]
)
async def test_dlq_policy_refuses_unprotected_messages(
    start_memory_group, keys, policy, caplog
) -> None:
    """Tolerate off and a group that does not protect, or a policy that does not let
    the group's identity protect: the DLQ put fails (DLQ_FAILED, the message is
    discarded); a protected message still goes on as it is."""
    group = await start_memory_group(policy)
    outcome = await dead_letter_both(group, keys, MODE.WF_MEM)
    assert (outcome["protected"], outcome["plain"]) == (Status.DLQ_SUCCESS, Status.DLQ_FAILED)
    assert "plain body" not in outcome
    assert is_protected(outcome["protected body"])
    assert "not put on the DLQ" in caplog.text


async def test_what_a_group_sends_to_a_protected_response_queue_passes(
    start_memory_group, keys
) -> None:
    """A sender attached to a protected queue (1.11, integrity) still gets its MRS_ACKs
    and its returned (protected) messages, the latter opened and verified: it sealed
    them itself (for privacy, to the policy's recipients and to itself)."""
    group = await start_memory_group()
    shop = app(group.config_path.parent, keys, "SHOP")
    async with group.connect("1.11", protection=shop) as sender:
        acked = await sender.put(SECRET, target="1.10", delivery=MODE.AK_DQF)
        returned = await sender.put(SECRET, target="1.50", delivery=MODE.WF_DQF, uma=Uma.RTS)
        assert returned.uma_status == Status.RTS_SUCCESS
        got = [await sender.get(timeout=5) for _ in range(2)]
    ack = next(m for m in got if m.is_mrs_ack)
    assert ack.ack_psb().seq == acked.seq
    back = next(m for m in got if not m.is_mrs_ack)
    assert back.delivery_status == Status.MSGUNDEL and back.seq == returned.seq
    assert back.body == SECRET
    assert back.headers["mrs_protection"] == {"signer": "SHOP", "quality": "privacy"}
    # An unprotected message returned here (any application may name 1.11 as its
    # resp_q) is checked like any other: refused on an integrity queue.
    async with group.connect("PLAIN") as plain:
        psb = await plain.put(
            b"forged", target="1.50", delivery=MODE.WF_MEM, uma=Uma.RTS, resp_q="1.11"
        )
        assert psb.uma_status == Status.RTS_SUCCESS
    async with group.connect("1.11", protection=shop) as sender:
        with pytest.raises(ProtectionRefused, match="unprotected"):
            await sender.get(timeout=5)


async def test_a_returned_body_that_only_looks_sealed_is_refused(start_memory_group, keys) -> None:
    """Any application can have a message returned to a protected queue (UMA RTS with
    that queue as its resp_q). A body that merely starts like an envelope, or an
    envelope whose signature does not verify, is refused and dead-lettered like any
    other message there, never delivered unopened."""
    group = await start_memory_group()
    shop = app(group.config_path.parent, keys, "SHOP")
    sealed = shop.seal_for("1.11", b"pay 10 to BOB", 1)
    forgeries = [b"MRSPDMQ1FORGED: pay mallory 1,000,000", sealed.replace(b"BOB", b"EVE")]
    async with group.connect("PLAIN") as plain:
        for body in forgeries:
            psb = await plain.put(
                body, target="1.50", delivery=MODE.WF_MEM, uma=Uma.RTS, resp_q="1.11"
            )
            assert psb.uma_status == Status.RTS_SUCCESS
    async with group.connect("1.11", protection=shop) as reader:
        for problem in ("malformed protected message", "does not verify"):
            with pytest.raises(ProtectionRefused, match=problem) as refused:
                await reader.get(timeout=5)
            assert refused.value.dead_lettered
        with pytest.raises(NoMoreMessages):
            await reader.get(timeout=0)


# ---------------------------------------------------------------------- channel rules
LINK_QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
"""


async def link_info(linked: LinkedBus, group: int, peer: int) -> dict:
    async with connect(linked.address(group), None) as client:
        return (await client.status())["links"][str(peer)]


async def wait_link(linked: LinkedBus, condition, group: int = 1, peer: int = 2) -> dict:
    """Poll another process's link status (no event to await) until `condition`."""
    with trio.fail_after(20):
        while True:
            info = await link_info(linked, group, peer)
            if condition(info):
                return info
            await trio.sleep(0.02)


def saf_seqs(journals: Path) -> list[int]:
    store = JournalStore(journals, readonly=True)
    try:
        return [record.seq for _key, record in store.scan(Journal.SAF)]
    finally:
        store.close()


@pytest.fixture
async def start_linked(tmp_path, keys, nursery):
    """Groups 1 and 2 (group 2: message_bytes_max = 1000) linked through a proxy, with
    the policies plus `extra`."""
    started: list[LinkedBus] = []

    async def start(extra: str) -> LinkedBus:
        linked = LinkedBus(
            tmp_path / f"bus{len(started)}",
            queues=LINK_QUEUES,
            group_limits={2: "message_bytes_max = 1000"},
        )
        with_protection(linked.config_path)
        write_policies(linked.directory, keys, extra)
        await linked.start_proxies(nursery)
        await trio.to_thread.run_sync(linked.start)
        started.append(linked)
        await wait_link(linked, lambda info: info["state"] == "up")
        return linked

    yield start
    for linked in started:
        linked.stop()


async def test_channel_backs_off_into_retry_when_the_dlq_refuses(start_linked, keys) -> None:
    """A recoverable message group 2 refuses for good (too big for it) moves to group
    1's DLQ; group 1's DLQ does not tolerate unprotected messages: a protected one is
    placed as it is, an unprotected one stays in the SAF and the link's drain goes
    into RETRY (the channel document: backed out, RETRY state)."""
    linked = await start_linked(DLQ_STRICT)
    big = SECRET * 60
    shop_keys = app(linked.directory, keys, "SHOP")
    async with (
        connect(linked.address(1), "OUT", protection=shop_keys) as shop,
        connect(linked.address(1), "DLQ") as dead,
    ):
        protected = await shop.put(big, target="2.10", delivery=MODE.WF_DQF, uma=Uma.SAF)
        assert (protected.delivery_status, protected.uma_status) == (
            Status.MSGTOOBIG,
            Status.SAF_SUCCESS,
        )
        message = await dead.get(timeout=10)  # moved by the channel rules, as it is
        assert message.seq == protected.seq and is_protected(message.body)
        assert opened(message.body, keys, "BILLING").data == big
        assert message.dead_letter_header["reason"] == 2030
        await dead.confirm(message.seq)

        # 2.11 has no policy: sent unprotected
        plain = await shop.put(big, target="2.11", delivery=MODE.WF_DQF, uma=Uma.SAF)
        assert plain.uma_status == Status.SAF_SUCCESS
        info = await wait_link(linked, lambda info: info["drain"] == "retry")
        assert info["saf_backlog"] == 1
        assert saf_seqs(linked.data_dir(1) / "journals") == [plain.seq]
        with pytest.raises(NoMoreMessages):
            await dead.get(timeout=0)
    assert "does not tolerate unprotected" in (linked.directory / "group1.log").read_text()


DLQ_2_STRICT = '[[policy]]\nqueue = "2.96"\nprotection = "integrity"\ntolerate = false\n'


async def test_receiving_group_dlq_refuses_and_the_sender_dead_letters(start_linked, keys):
    """Receiver channels place undelivered messages on their own DLQ: group 2 has no
    queue 50, so it puts what group 1 sends there on its DLQ, whose policy does not
    tolerate unprotected messages. The protected message goes on group 2's DLQ as it
    is; the unprotected one is refused there, so group 2 answers NO_DQF and group 1's
    channel rules put it on group 1's DLQ (no policy: as it is)."""
    linked = await start_linked(DLQ_2_STRICT)
    async with connect(
        linked.address(1), "OUT", protection=app(linked.directory, keys, "SHOP")
    ) as shop:
        protected = await shop.put(SECRET, target="2.50", delivery=MODE.WF_SAF, uma=Uma.DISC)
        plain = await shop.put(SECRET, target="2.51", delivery=MODE.WF_SAF, uma=Uma.DISC)
    assert protected.delivery_status == plain.delivery_status == Status.STORED
    await wait_link(linked, lambda info: info["saf_backlog"] == 0)
    async with (
        connect(linked.address(2), "DLQ") as receiving,
        connect(linked.address(1), "DLQ") as sending,
    ):
        at_2 = await receiving.get(timeout=10)
        at_1 = await sending.get(timeout=10)
        for dead in (receiving, sending):
            with pytest.raises(NoMoreMessages):
                await dead.get(timeout=0)
    assert at_2.seq == protected.seq and at_2.dead_letter_header["put_appl_name"] == "G2"
    assert opened(at_2.body, keys, "BILLING").data == SECRET
    assert (at_1.seq, at_1.body) == (plain.seq, SECRET)
    assert at_1.dead_letter_header["put_appl_name"] == "G1"
    assert at_1.dead_letter_header["reason"] == 2085
    assert "does not tolerate unprotected" in (linked.directory / "group2.log").read_text()


async def test_the_dlq_handler_works_from_the_header_alone(start_group, keys) -> None:
    """`mrs dlq-handler` matches on the dead-letter header (in clear) and forwards the
    envelope untouched: it needs no key, and the forwarded message still opens for the
    recipient at its new queue."""
    group, directory = start_group()
    async with connect(group.address, "SENDER", protection=app(directory, keys, "SHOP")) as shop:
        psb = await shop.put(SECRET, target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ)
        assert psb.uma_status == Status.DLQ_SUCCESS
    rules = directory / "rules.txt"
    rules.write_text("REASON(MQRC_UNKNOWN_OBJECT_NAME) ACTION(FWD) FWDQ(PAYMENTS) HEADER(NO)\n")
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config"]
    command += [str(directory / "bus.toml"), "--group", "1", "--address", group.address]
    command += ["--once", str(rules)]
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=60)
    )
    assert done.returncode == 0, done.stderr
    assert "forwarded=1" in done.stdout + done.stderr
    async with connect(group.address, "1.10", protection=app(directory, keys, "BILLING")) as q:
        message = await q.get(timeout=5)
    assert message.body == SECRET
    assert message.headers["mrs_protection"]["signer"] == "SHOP"


def test_the_blocking_client_seals_and_refuses_too(start_group, keys) -> None:
    group, directory = start_group()
    with connect_sync(group.address, "SENDER", protection=app(directory, keys, "SHOP")) as shop:
        psb = shop.put(SECRET, target="1.10", delivery=MODE.WF_DQF)
    with connect_sync(group.address, "SENDER") as plain:
        plain.put(b"unsigned", target="1.10", delivery=MODE.WF_DQF)
    with connect_sync(group.address, "1.10", protection=app(directory, keys, "BILLING")) as q:
        message = q.get(timeout=5)
        assert (message.seq, message.body) == (psb.seq, SECRET)
        q.confirm(message.seq)
        with pytest.raises(ProtectionRefused, match="unprotected"):
            q.get(timeout=5)


def test_a_bad_policy_file_stops_mrs_serve_with_one_line(tmp_path, keys) -> None:
    config = write_single_group_config(tmp_path, queues=QUEUES)
    with_protection(config)
    (tmp_path / "protection.toml").write_text(
        f'keys_dir = "{keys}"\n[[policy]]\nqueue = "1.96"\nprotection = "secret"\n'
    )
    command = [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "config error" in done.stderr and "policy[0].protection" in done.stderr


async def test_the_client_saf_journal_holds_the_envelope(tmp_path, keys) -> None:
    """With the group unreachable, a protected put is journaled on the client's disk
    already sealed: the client's journal file is no more readable than the group's."""
    write_policies(tmp_path, keys)
    shop = app(tmp_path, keys, "SHOP")
    journal = tmp_path / "client.saf"
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    async with connect(
        address, "SENDER", saf_journal=journal, protection=shop, connect_timeout_s=1
    ) as client:
        assert client.attach_status == Status.JOURNAL_ON
        psb = await client.put(SECRET, target="1.10", delivery=MODE.WF_DQF)
        assert psb.status == Status.JOURNAL_ON and client.journal_backlog == 1
    stored = b"".join(path.read_bytes() for path in journal.rglob("*") if path.is_file())
    assert b"MRSPDMQ1" in stored and SECRET not in stored
