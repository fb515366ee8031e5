"""Authentication and permissions against real `mrs serve` processes with [auth] on:
every deny path, and each attack of issue 15 (impersonation, theft, squatting,
forgery) tried and refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio

from clients import (
    DeliveryMode,
    ForceJrn,
    MrsError,
    NoMoreMessages,
    NotAuthorized,
    Status,
    Uma,
    connect,
)
from mrs import protocol as wire
from mrs.security.handshake import AuthFailed, authenticate
from tests.auth_helpers import SecureBus, creds, password_of

WAIT_S = 20.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    bus = SecureBus(tmp_path_factory.mktemp("secure"))
    bus.start()
    yield bus
    bus.stop()


async def status_of(address: str) -> dict:
    async with connect(address, None, credentials=creds("ops")) as client:
        return await client.status()


async def wait_link_up(bus: SecureBus) -> None:
    with trio.fail_after(WAIT_S):
        while (await status_of(bus.address(1)))["links"]["2"]["state"] != "up":
            await trio.sleep(0.05)


async def raw_stream(address: str) -> trio.SocketStream:
    host, port = address.rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def first_event(stream: trio.abc.Stream, connection: wire.Connection) -> object:
    """The next protocol event the server sends (CLOSED if it just closes)."""
    with trio.fail_after(WAIT_S):
        while True:
            data = await stream.receive_some(65536)
            connection.receive_data(data)
            events = [event for event in connection.events() if event is not wire.CLOSED]
            if events:
                return events[0]
            if not data:
                return wire.CLOSED


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


# -- authentication ---------------------------------------------------------------


async def test_a_connection_without_credentials_can_do_nothing(secure) -> None:
    with pytest.raises(NotAuthorized, match="requires authentication"):
        async with connect(secure.address(1), "1.10", reconnect=None):
            pass
    stream = await raw_stream(secure.address(1))
    async with stream:
        connection = wire.Connection("client")
        hello = wire.Hello(wire.PROTOCOL_VERSION, "sneaky")
        status = wire.StatusRequest(1)
        await stream.send_all(connection.send(hello) + connection.send(status))
        event = await first_event(stream, connection)
    assert isinstance(event, wire.Fatal) and event.status == Status.NOTAUTHORIZED


@pytest.mark.parametrize("name", ["consumer", "nobody"])
async def test_a_wrong_password_or_unknown_name_is_refused_alike(secure, name) -> None:
    with pytest.raises(NotAuthorized) as refused:
        async with connect(secure.address(1), "1.10", credentials=creds(name, "wrong")):
            pass
    assert refused.value.message == f"authentication failed for {name!r}"


async def test_a_silent_connection_is_closed_after_the_deadline(secure) -> None:
    stream = await raw_stream(secure.address(1))
    async with stream:
        started = trio.current_time()
        with trio.fail_after(WAIT_S):
            while await stream.receive_some(65536):
                pass  # the refusal frame, then EOF
    assert trio.current_time() - started >= 1.5  # handshake_s_max = 2 in the fixture


async def test_the_password_never_crosses_the_wire(secure) -> None:
    """Record the client's bytes: neither the password nor its salted form is in them."""
    sent = bytearray()

    class Recording(trio.abc.Stream):
        def __init__(self, inner):
            self.inner = inner

        async def send_all(self, data):
            sent.extend(data)
            await self.inner.send_all(data)

        async def receive_some(self, max_bytes=None):
            return await self.inner.receive_some(max_bytes)

        async def wait_send_all_might_not_block(self):
            await self.inner.wait_send_all_might_not_block()

        async def aclose(self):
            await self.inner.aclose()

    stream = Recording(await raw_stream(secure.address(1)))
    async with stream:
        proven = await authenticate(stream, creds("consumer"))
    assert proven.group == 1
    assert password_of("consumer").encode() not in bytes(sent)


# -- theft, squatting, confirm without the right -------------------------------------


async def test_theft_attach_to_another_apps_queue_is_refused(secure) -> None:
    with pytest.raises(NotAuthorized, match="attach to 1.10 is not granted"):
        async with connect(secure.address(1), "1.10", credentials=creds("thief")):
            pass
    with pytest.raises(NotAuthorized, match="attach to 1.10 is not granted"):
        async with connect(secure.address(1), "IN", credentials=creds("thief")):
            pass


async def test_a_squatter_cannot_lock_the_consumer_out(secure) -> None:
    async with connect(secure.address(1), "1.11", credentials=creds("thief")) as squatter:
        assert squatter.queue is not None
        async with connect(secure.address(1), "1.10", credentials=creds("consumer")) as real:
            assert str(real.queue) == "1.10"


async def test_confirm_without_the_right_changes_nothing(secure) -> None:
    """A reader that may get but not confirm cannot confirm NO_JRN (the theft that
    leaves no PCJ trace): the message stays unconfirmed and comes back marked."""
    await put(secure.address(1), "producer", "1.13", "1.10", body=b"secret",
              delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)  # fmt: skip
    async with connect(secure.address(1), "1.10", credentials=creds("reader")) as reader:
        message = await reader.get(timeout=10)
        assert message.body == b"secret"
        with pytest.raises(NotAuthorized, match="confirm on 1.10 is not granted"):
            await reader.confirm(message.seq, force_j=ForceJrn.NO_JRN)
    async with connect(secure.address(1), "1.10", credentials=creds("consumer")) as consumer:
        again = await consumer.get(timeout=10)
        assert (again.seq, again.delivery_status) == (message.seq, Status.POSSDUPL)
        await consumer.confirm(again.seq, force_j=ForceJrn.FORCE_JRN)


# -- put, DLQ, replay, status ------------------------------------------------------


async def test_put_to_a_target_not_granted_stores_nothing(secure) -> None:
    with pytest.raises(NotAuthorized, match="put to 1.11 is not granted"):
        await put(secure.address(1), "producer", "1.13", "1.11",
                  delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)  # fmt: skip
    async with connect(secure.address(1), "1.11", credentials=creds("thief")) as owner:
        with pytest.raises(NoMoreMessages):
            await owner.get(timeout=0)
    log = secure.log(1)
    assert "denied Put from 'producer'" in log and "put to 1.11 is not granted" in log


@pytest.mark.parametrize(
    ("target", "headers", "problem"),
    [
        ("1.96", None, "put to dead letter queue 1.96 needs the admin right 'dlq'"),
        ("DLQ", None, "put to dead letter queue 1.96 needs the admin right 'dlq'"),
        ("1.10", {"dead_letter_header": {"reason": -18}}, "admin right 'dlq'"),
        ("1.10", {"replay": {"journal": "pcj", "seq": 1}}, "admin right 'replay'"),
    ],
)
async def test_dead_letter_and_replay_puts_need_admin_rights(
    secure, target, headers, problem
) -> None:
    with pytest.raises(NotAuthorized, match=problem):
        await put(secure.address(1), "producer", "1.13", target, headers=headers)


async def test_admin_rights_open_what_they_name(secure) -> None:
    psb = await put(secure.address(1), "dlqadmin", "1.13", "1.96")
    assert psb.status == Status.SUCCESS
    psb = await put(secure.address(1), "replayer", "1.13", "1.11",
                    headers={"replay": {"journal": "pcj", "seq": 1}})  # fmt: skip
    assert psb.status == Status.SUCCESS
    with pytest.raises(NotAuthorized, match="admin right 'dlj'"):
        await put(secure.address(1), "replayer", "1.13", "1.11",
                  headers={"replay": {"journal": "dlj", "seq": 1}})  # fmt: skip
    with pytest.raises(NotAuthorized, match="dead letter queue 1.96"):
        async with connect(secure.address(1), "1.96", credentials=creds("producer")):
            pass
    async with connect(secure.address(1), "1.96", credentials=creds("dlqadmin")) as handler:
        assert (await handler.get(timeout=10)).body == b"m"


async def test_status_needs_the_status_right(secure) -> None:
    async with connect(secure.address(1), None, credentials=creds("producer")) as client:
        with pytest.raises(NotAuthorized, match="status needs the admin right 'status'"):
            await client.status()
    info = await status_of(secure.address(1))
    assert info["links"]["2"]["state"] in ("up", "down")


def test_the_status_command_takes_credentials_from_the_environment(secure) -> None:
    def status(**env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mrs", "status", "--address", secure.address(1), "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=60,
        )

    password_file = secure.directory / "ops.pw"
    allowed = status(MRS_AUTH_NAME="ops", MRS_AUTH_PASSWORD_FILE=str(password_file))
    assert allowed.returncode == 0, allowed.stderr
    denied = status(MRS_AUTH_NAME="producer", MRS_AUTH_PASSWORD=password_of("producer"))
    assert denied.returncode != 0
    assert "NOTAUTHORIZED" in denied.stderr and "Traceback" not in denied.stderr


def test_a_group_that_refuses_the_status_is_refused_not_down(secure) -> None:
    """It answered: advising `mrs serve` for a running group sends the operator astray."""
    single = subprocess.run(
        [sys.executable, "-m", "mrs", "status", "--address", secure.address(1)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MRS_AUTH")},
        timeout=60,
    )
    assert single.returncode == 1 and single.stderr.count("\n") == 1, single.stderr
    assert "REFUSED" in single.stderr and "requires authentication" in single.stderr
    assert "mrs serve" not in single.stderr and "MRS_AUTH_NAME" in single.stderr
    bus = subprocess.run(
        [sys.executable, "-m", "mrs", "status", "--config", str(secure.config_path), "--json"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "MRS_AUTH_NAME": "producer",
            "MRS_AUTH_PASSWORD": "pw-producer-correct horse",
        },
        timeout=60,
    )
    assert bus.returncode == 1, bus.stderr
    states = {g["group"]: (g["state"], g["refused"]) for g in json.loads(bus.stdout)["groups"]}
    assert states[1][0] == "REFUSED" and "needs the admin right 'status'" in states[1][1]


# -- links: impersonation and forgery ------------------------------------------------


async def test_link_impersonation_is_refused_and_the_real_link_stays(secure) -> None:
    """A raw client sends a link Hello claiming group 1: without authentication, and
    authenticated as an application; and tries group 1's name with a wrong secret."""
    await wait_link_up(secure)
    for name in (None, "producer"):
        stream = await raw_stream(secure.address(2))
        async with stream:
            if name is not None:
                await authenticate(stream, creds(name))
            connection = wire.Connection("client")
            hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
            await stream.send_all(connection.send(hello))
            event = await first_event(stream, connection)
        assert isinstance(event, wire.Fatal) and event.status == Status.NOTAUTHORIZED, event
    stream = await raw_stream(secure.address(2))
    async with stream:
        with pytest.raises(AuthFailed, match="authentication failed for 'group:1'"):
            await authenticate(stream, creds("group:1", "guessed"))
    assert "refused link Hello claiming group 1 from 'producer'" in secure.log(2)
    await wait_link_up(secure)
    # Group 2's own view: its link to group 1 was never replaced, so it never went down.
    assert (await status_of(secure.address(2)))["links"]["1"]["state"] == "up"
    assert "link to group 1 down" not in secure.log(2)
    psb = await put(secure.address(1), "producer", "1.13", "2.10", body=b"across",
                    delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)  # fmt: skip
    assert psb.delivery_status == Status.STORED
    async with connect(secure.address(2), "2.10", credentials=creds("consumer2")) as receiver:
        message = await receiver.get(timeout=10)
        assert message.body == b"across"
        await receiver.confirm(message.seq)


async def test_forged_transfers_are_refused(secure) -> None:
    """An authenticated application injects a LinkTransfer with a plausible seq: the
    connection is closed and nothing reaches the queue."""
    stream = await raw_stream(secure.address(2))
    async with stream:
        await authenticate(stream, creds("consumer2"))
        connection = wire.Connection("client", frame_bytes_max=1 << 20)
        await stream.send_all(connection.send(wire.Hello(wire.PROTOCOL_VERSION, "forger")))
        assert isinstance(await first_event(stream, connection), wire.Welcome)
        message = wire.TransferredMessage(
            1, 10, 2, 10, b"forged", 0, 0, 0, int(DeliveryMode.WF_DQF), int(Uma.DISC), b"", 1,
            None, False,
        )  # fmt: skip
        forged = wire.LinkTransfer(1, [message])
        await stream.send_all(connection.send(forged))
        event = await first_event(stream, connection)
    # Closed, with a Fatal when the server's send loop is idle at that moment.
    assert event is wire.CLOSED or isinstance(event, wire.Fatal), event
    async with connect(secure.address(2), "2.10", credentials=creds("consumer2")) as receiver:
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)


async def test_a_password_file_reads_as_mrs_creds_reads_it(secure, tmp_path) -> None:
    """`echo PASSWORD > app.pw` ends in a newline; `mrs creds --password-file` strips
    it, so the client must too or the password registered is not the one sent."""
    from clients import ClientCredentials
    from mrs.security.creds import CredsError

    saved = tmp_path / "producer.pw"
    saved.write_text(f"  {password_of('producer')}\n")
    with pytest.raises(NotAuthorized):  # what reading the file by hand gives
        async with connect(secure.address(1), "1.13", credentials=ClientCredentials(
            "producer", saved.read_text())):  # fmt: skip
            pass
    from_file = ClientCredentials.from_file("producer", saved)
    assert "correct horse" not in repr(from_file)
    async with connect(secure.address(1), "1.13", credentials=from_file) as producer:
        psb = await producer.put(b"from a file", target="1.10", delivery=DeliveryMode.WF_MEM)
        assert psb.status == Status.SUCCESS
    with pytest.raises(CredsError, match="missing.pw: No such file") as missing:
        ClientCredentials.from_file("producer", tmp_path / "missing.pw")
    assert isinstance(missing.value, MrsError)  # caught with the rest of the client's
    (tmp_path / "empty.pw").write_text("\n")
    with pytest.raises(CredsError, match="is empty"):
        ClientCredentials.from_file("producer", tmp_path / "empty.pw")
