"""What an authenticated attacker tried against real `mrs serve` processes with [auth]
on, and is now refused: a response queue naming another application's queue, a
revoked principal's parked get, probing which names exist (salts and rounds), and
NOSUCHQUEUE answers that listed the group's queues and the config path."""

from __future__ import annotations

import base64

import pytest
import trio
import trio.testing

from clients import (
    DeliveryMode,
    MrsError,
    NoMoreMessages,
    NoSuchQueue,
    NotAuthorized,
    Status,
    Uma,
    connect,
)
from mrs import protocol as wire
from mrs.security import creds as store
from mrs.security.handshake import AUTH_VERSION, FrameReader, authenticate, encode
from mrs.security.permissions import NONE
from mrs.security.scram import nonce
from tests.auth_helpers import SecureBus, add_principal, creds, mrs, password_of

WAIT_S = 20.0


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Two linked groups; `operator` may read the status (and attach to 1.13), `odd`
    was made with other PBKDF2 rounds than everyone else."""
    bus = SecureBus(tmp_path_factory.mktemp("probed"))
    config = bus.config_path
    assert config is not None
    add_principal(config, "operator", ["--admin", "status", "--attach", "1.13"])
    (bus.directory / "odd.pw").write_text(password_of("odd"))
    mrs("creds", "add", "odd", "--config", str(config), "--password-file",
        str(bus.directory / "odd.pw"), "--iterations", "2000", "--attach", "1.13")  # fmt: skip
    bus.start()
    yield bus
    bus.stop()


@pytest.fixture
def single(tmp_path):
    bus = SecureBus(tmp_path / "single", group_ids=(1,))
    bus.start()
    yield bus
    bus.stop()


async def raw_stream(address: str) -> trio.SocketStream:
    host, port = address.rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def next_event(stream: trio.abc.Stream, connection: wire.Connection) -> object:
    """The next protocol event the server sends (CLOSED if it just closes), its
    heartbeat Pings aside."""
    with trio.fail_after(WAIT_S):
        while True:
            events = [
                event
                for event in connection.events()
                if event is not wire.CLOSED and not isinstance(event, wire.Ping)
            ]
            if events:
                return events[0]
            data = await stream.receive_some(65536)
            if not data:
                return wire.CLOSED
            connection.receive_data(data)


async def challenge(address: str, name: str) -> tuple[bytes, int]:
    """The salt and rounds a group answers for `name` (the first server frame)."""
    stream = await raw_stream(address)
    async with stream:
        await stream.send_all(encode({"auth": AUTH_VERSION, "name": name, "nonce": nonce()}))
        with trio.fail_after(WAIT_S):
            frame = await FrameReader(stream).frame()
    assert isinstance(frame, dict), frame
    return frame["salt"], frame["iterations"]


async def parked_get(
    address: str, name: str, queue: str
) -> tuple[trio.SocketStream, wire.Connection]:
    """A raw client of `name` attached to `queue` with a Get parked on it: the Pong
    to the Ping sent after it says the server has dispatched (parked) the Get."""
    stream = await raw_stream(address)
    await authenticate(stream, creds(name))
    connection = wire.Connection("client")
    await stream.send_all(connection.send(wire.Hello(wire.PROTOCOL_VERSION, "probe")))
    assert isinstance(await next_event(stream, connection), wire.Welcome)
    await stream.send_all(connection.send(wire.Attach(1, queue)))
    assert isinstance(await next_event(stream, connection), wire.Attached)
    get, ping = wire.Get(2, -1), wire.Ping(7)
    await stream.send_all(connection.send(get) + connection.send(ping))
    assert await next_event(stream, connection) == wire.Pong(7)
    return stream, connection


async def put(address: str, name: str, source: str, target: str, **options) -> object:
    async with connect(address, source, credentials=creds(name)) as client:
        return await client.put(
            options.pop("body", b"m"),
            target=target,
            delivery=options.pop("delivery", DeliveryMode.WF_MEM),
            uma=options.pop("uma", Uma.DISC),
            timeout=10,
            **options,
        )


# -- 1: a response queue is a put to that queue ------------------------------------


@pytest.mark.parametrize(
    ("target", "delivery", "uma", "resp_q", "problem"),
    [
        ("1.10", DeliveryMode.WF_MEM, Uma.RTS, "1.11", "response queue 1.11 is not granted"),
        ("1.10", DeliveryMode.WF_MEM, Uma.RTS, "OTHER", "response queue 1.11 is not granted"),
        ("2.10", DeliveryMode.AK_DQF, Uma.SAF, "1.11", "response queue 1.11 is not granted"),
        ("2.10", DeliveryMode.AK_MEM, Uma.DISC, "2.11", None),  # put 2.* is granted
        ("1.10", DeliveryMode.WF_MEM, Uma.RTS, "1.96", "is a dead letter queue"),
    ],
)
async def test_a_response_queue_must_be_one_the_sender_may_put_to(
    probed, target, delivery, uma, resp_q, problem
) -> None:
    """`producer` may put to 1.10 and 2.*, not to 1.11 (thief's): naming 1.11 as its
    resp_q would have its RTS body or MRS_ACK put there. Refused at the put, logged,
    and nothing reaches 1.11."""
    address = probed.address(1)
    if problem is None:
        psb = await put(address, "producer", "1.13", target, body=b"ok",
                        delivery=delivery, uma=uma, resp_q=resp_q)  # fmt: skip
        assert psb.status == Status.SUCCESS
        return
    with pytest.raises(NotAuthorized, match=problem):
        await put(address, "producer", "1.13", target, body=b"FORGED: pay mallory 1,000,000",
                  delivery=delivery, uma=uma, resp_q=resp_q)  # fmt: skip
    async with connect(address, "1.11", credentials=creds("thief")) as owner:
        with pytest.raises(NoMoreMessages):
            await owner.get(timeout=0)
    assert "denied Put from 'producer'" in probed.log(1) and problem in probed.log(1)


async def test_the_senders_own_queue_is_always_a_good_response_queue(probed) -> None:
    psb = await put(probed.address(1), "producer", "1.13", "1.10",
                    delivery=DeliveryMode.WF_MEM, uma=Uma.RTS, resp_q="1.13")  # fmt: skip
    assert psb.status == Status.SUCCESS


# -- 2: revocation ends what the principal was waiting for ---------------------------


async def test_removing_a_principal_ends_its_parked_get_at_once(single) -> None:
    """`mrs creds remove` with a get parked and nobody else connecting: the get's
    connection is closed NOTAUTHORIZED within the server's file check, and a message
    put afterwards waits for someone still allowed, whole."""
    address = single.address(1)
    stream, connection = await parked_get(address, "consumer", "1.10")
    async with stream:
        mrs("creds", "remove", "consumer", "--config", str(single.config_path))
        event = await next_event(stream, connection)
        assert isinstance(event, wire.Fatal), event
        assert event.status == Status.NOTAUTHORIZED and "'consumer' was removed" in event.message
    psb = await put(address, "producer", "1.13", "1.10", body=b"after",
                    delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)  # fmt: skip
    assert psb.delivery_status == Status.STORED
    async with connect(address, "1.10", credentials=creds("reader")) as reader:
        message = await reader.get(timeout=10)
    assert message.body == b"after"
    assert "'consumer' was removed from the credentials" in single.log(1)


async def test_a_removed_application_is_told_why_and_does_not_reconnect(single) -> None:
    """Through the client library: the parked get raises NotAuthorized naming the
    removal, and so does the next request (no reconnect that would be refused)."""
    outcome: list[BaseException] = []

    async def wait_for_a_message(client) -> None:
        try:
            await client.get(timeout=WAIT_S)
        except MrsError as error:
            outcome.append(error)

    async with connect(single.address(1), "1.10", credentials=creds("consumer")) as live:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_a_message, live)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(NotAuthorized):  # answered after the get went out
                await live.status()
            mrs("creds", "remove", "consumer", "--config", str(single.config_path))
        assert [type(error) for error in outcome] == [NotAuthorized]
        assert "'consumer' was removed" in outcome[0].message
        with pytest.raises(NotAuthorized, match="'consumer' was removed"):
            await live.put(b"m", target="1.10")


async def test_a_get_grant_taken_away_refuses_the_parked_get(single) -> None:
    """`mrs creds grant` without the attach grant: the parked get is answered
    NOTAUTHORIZED (not handed the next message); the connection stays."""
    address = single.address(1)
    stream, connection = await parked_get(address, "consumer", "1.10")
    async with stream:
        mrs("creds", "grant", "consumer", "--config", str(single.config_path),
            "--confirm", "1.10")  # fmt: skip
        event = await next_event(stream, connection)
        assert isinstance(event, wire.Failure), event
        assert (event.request_id, event.status) == (2, Status.NOTAUTHORIZED)
        assert "get from 1.10 is not granted" in event.message
        await stream.send_all(connection.send(wire.Ping(8)))
        assert await next_event(stream, connection) == wire.Pong(8)


# -- 3: names cannot be probed by salt or rounds -------------------------------------


async def test_an_unknown_name_answers_like_a_known_one_on_every_group_and_restart(
    probed,
) -> None:
    names = ["consumer", "odd", "nobody", "ghost"]
    before = {name: await challenge(probed.address(1), name) for name in names}
    for name in names:  # every group reads the same credentials file
        assert await challenge(probed.address(2), name) == before[name], name
    probed.processes[1].terminate()
    probed.processes[1].start()
    after = {name: await challenge(probed.address(1), name) for name in names}
    assert after == before  # a real name's salt stays; an unknown one's must too


async def test_unusual_rounds_do_not_single_out_a_principal(probed) -> None:
    """`odd` uses 2000 rounds, the 11 others 1000: unknown names show 2000 as often
    (1 in 12), so seeing 2000 says nothing (200 names all at 1000: p < 1e-7)."""
    assert (await challenge(probed.address(1), "odd"))[1] == 2000
    rounds = [(await challenge(probed.address(1), f"ghost-{i}"))[1] for i in range(200)]
    assert set(rounds) == {1000, 2000}


# -- 4: NOSUCHQUEUE says only that the queue is unknown -------------------------------


@pytest.mark.parametrize("target", ["NOPE", "NOWHERE.ORDERS", "G2.NOPE"])
async def test_an_unknown_queue_names_nothing_else_without_the_status_right(probed, target) -> None:
    with pytest.raises(NoSuchQueue) as refused:
        await put(probed.address(1), "producer", "1.13", target)
    message = refused.value.message
    assert message == f"unknown queue {target!r}"
    with pytest.raises(NoSuchQueue) as refused:
        async with connect(probed.address(1), target, credentials=creds("producer")):
            pass
    assert str(probed.directory) not in refused.value.message
    assert "IN" not in refused.value.message.replace(target, "")


async def test_the_status_right_reads_what_an_unknown_queue_is(probed) -> None:
    with pytest.raises(NoSuchQueue) as refused:
        await put(probed.address(1), "operator", "1.13", "NOPE")
    assert "(queues: IN, OTHER, SENDER" in refused.value.message
    with pytest.raises(NoSuchQueue) as refused:
        await put(probed.address(1), "operator", "1.13", "NOWHERE.ORDERS")
    assert str(probed.config_path) in refused.value.message


def test_the_decoy_key_is_made_once_and_kept_by_every_edit(tmp_path) -> None:
    """What makes an unknown name's answer stable lives in the file all groups read."""
    path = tmp_path / "creds.toml"
    credentials = store.Credentials()
    store.add(credentials, "shop", "pw", NONE, iterations=1000)
    store.save(path, credentials)
    key = store.load(path).decoy_key
    assert key is not None and len(key) == store.DECOY_KEY_BYTES
    edited = store.load(path)
    store.remove(edited, "shop")
    store.save(path, edited)
    assert store.load(path).decoy_key == key
    older = path.read_text().replace(f'decoy_key = "{base64.b64encode(key).decode()}"', "")
    path.write_text(older)  # a file from before decoy_key: still loads, still stable
    assert store.load(path).decoy_key is None
    assert store.load(path).decoy_secret() == store.load(path).decoy_secret()
