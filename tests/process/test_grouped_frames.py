"""Frames shared by many requests or answers (mrs.transport.framed's groups): the puts a client
has ready together go out in one PutBatch, and the PutDones and Confirmeds a server
has ready together go to a client that reads them in one AnswerBatch; each put and
each answer still counts as if it had come alone, in the order it was made. A client
that did not say it reads AnswerBatch gets one frame per answer.

The protocol rules in process; the framing over a real TCP pair; the whole path
against a real server (LMDB journals, TCP) with the client library, through a proxy
that reads the client's frames, and with a bare client whose Hello is an older one.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from pathlib import Path

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect
from mrs import protocol as wire
from mrs.config.bus import load_config
from mrs.limits import ANSWER_BATCH_ITEMS_MAX, PUT_GROUP_BYTES_MAX
from mrs.server.group_server import GroupServer
from mrs.transport.framed import FramedStream
from sim.processes import write_single_group_config
from tests.conftest import STANDARD_QUEUES
from tests.unit.test_framed import opened_pair

HEADER = struct.Struct(">I")


def open_pair() -> tuple[wire.Connection, wire.Connection]:
    """A client and a server Connection past their handshake (sans I/O)."""
    client, server = wire.Connection("client"), wire.Connection("server")
    server.receive_data(client.send(wire.Hello(wire.PROTOCOL_VERSION, "t", "app", 0, True)))
    assert isinstance(server.next_event(), wire.Hello)
    client.receive_data(server.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "g1")))
    assert isinstance(client.next_event(), wire.Welcome)
    return client, server


ANSWERS = st.one_of(
    st.builds(
        wire.PutDone,
        st.integers(1, 10_000),
        st.integers(-30, 30),
        st.integers(-30, 30),
        st.integers(0, 2**40),
        st.integers(-30, 30),
    ),
    st.builds(wire.Confirmed, st.integers(1, 10_000), st.integers(0, 2**40), st.integers(-30, 30)),
)


@given(st.lists(ANSWERS, min_size=1, max_size=50, unique_by=lambda a: a.request_id))
def test_each_answer_of_a_batch_arrives_as_sent_and_ends_its_request(answers: list) -> None:
    client, server = open_pair()
    for answer in answers:  # the client asked for each: one Confirm per id
        server.receive_data(client.send(wire.Confirm(answer.request_id, 1, 0, 0)))
    assert len(server.events()) == len(answers)
    assert client.our_requests_in_flight == len(answers)
    client.receive_data(server.send(wire.AnswerBatch(answers)))
    assert server.their_requests_in_flight == 0
    (batch,) = client.events()
    assert batch.answers == answers
    assert client.our_requests_in_flight == 0  # every id may be used again
    client.send(wire.Confirm(answers[0].request_id, 1, 0, 0))


def frame(*fields: object) -> bytes:
    body = msgspec.msgpack.encode(list(fields))
    return HEADER.pack(len(body)) + body


@pytest.mark.parametrize(
    ("fields", "wording"),
    [
        ((26, []), r"AnswerBatch.answers must hold 1..1000 items, got 0"),
        (
            (26, [[15, 1, 1, b"x", "1.1", "1.2", 0, 0, 0, 1, 1, b"", 0, None]]),
            r"AnswerBatch.answers\[0\] must be a PutDone or Confirmed, got \[15, 1, 1",
        ),
        ((26, [[13, 1, 0, 1, 2]]), r"AnswerBatch.answers\[0\] has 4 fields, expected 5"),
        ((26, [[17, 0, 1, 0]]), r"AnswerBatch.answers\[0\].request_id must be 1..2\*\*63-1"),
        ((26, [[13, 1, 0, 1, 2, "x"]]), r"answers\[0\].uma_status must be an int, got str"),
    ],
    ids=["empty", "a delivery inside", "a short PutDone", "request id 0", "a str status"],
)
def test_a_bad_answer_batch_is_refused_in_words(fields: tuple, wording: str) -> None:
    client, _ = open_pair()
    client.receive_data(frame(*fields))
    with pytest.raises(wire.RemoteProtocolError, match=wording):
        client.events()


def test_only_a_server_sends_an_answer_batch() -> None:
    client, server = open_pair()
    with pytest.raises(wire.LocalProtocolError, match="AnswerBatch, which only a server sends"):
        client.send(wire.AnswerBatch([wire.Confirmed(1, 1, 0)]))
    server.receive_data(frame(26, [[17, 1, 1, 0]]))
    with pytest.raises(wire.RemoteProtocolError, match="AnswerBatch, which only a server sends"):
        server.events()


def test_a_hello_without_the_field_is_an_older_client_that_reads_no_batches() -> None:
    hello = msgspec.msgpack.encode([1, wire.PROTOCOL_VERSION, "old", "app", 0])
    server = wire.Connection("server")
    server.receive_data(HEADER.pack(len(hello)) + hello)
    assert server.next_event().answer_batches is False


async def test_answers_go_out_in_order_with_the_frames_sent_between_them() -> None:
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        server.answer(wire.PutDone(1, 0, 1, 10, 2))
        server.answer(wire.Confirmed(2, 11, 0))
        server.send(wire.Failure(3, -14, "refused"))
        server.answer(wire.PutDone(4, 0, 1, 12, 2))
        await server.flush()
        with trio.fail_after(10):
            got = [await client.next_event() for _ in range(3)]
        assert got == [
            wire.AnswerBatch([wire.PutDone(1, 0, 1, 10, 2), wire.Confirmed(2, 11, 0)]),
            wire.Failure(3, -14, "refused"),
            wire.PutDone(4, 0, 1, 12, 2),  # alone: as itself, not a batch of one
        ]
        nursery.cancel_scope.cancel()


async def test_a_batch_holds_at_most_answer_batch_items_max() -> None:
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        count = 2 * ANSWER_BATCH_ITEMS_MAX + 500
        for request_id in range(1, count + 1):
            server.answer(wire.Confirmed(request_id, request_id, 0))
        nursery.start_soon(server.flush)
        sizes: list[int] = []
        with trio.fail_after(10):
            while sum(sizes) < count:
                sizes.append(len((await client.next_event()).answers))
        assert sizes == [ANSWER_BATCH_ITEMS_MAX, ANSWER_BATCH_ITEMS_MAX, 500]
        nursery.cancel_scope.cancel()


async def started(nursery: trio.Nursery, tmp_path: Path) -> str:
    bus = load_config(write_single_group_config(tmp_path, queues=STANDARD_QUEUES))
    host, port = await nursery.start(GroupServer(bus, bus.group(1)).run)
    return f"{host}:{port}"


async def test_a_server_answers_a_busy_client_in_batches_and_every_request_once(
    tmp_path: Path,
) -> None:
    count = 300
    async with trio.open_nursery() as nursery:
        address = await started(nursery, tmp_path)
        frames: list[type] = []
        answered: list[int] = []

        async with connect(address, "SENDER") as sender:
            dispatch = sender._requests.dispatch

            def counting(link: object, event: object) -> None:
                """Each frame read, and each answer (a batch's items come here again)."""
                if type(event) is wire.AnswerBatch:
                    frames.append(wire.AnswerBatch)
                    inside.append(len(event.answers))
                elif inside and inside[-1]:
                    inside[-1] -= 1  # an item of the batch being dispatched
                else:
                    frames.append(type(event))
                if type(event) is not wire.AnswerBatch:
                    answered.append(getattr(event, "request_id", 0))
                dispatch(link, event)

            inside: list[int] = []

            sender._requests.dispatch = counting

            with trio.fail_after(30):
                psbs = await put_all(sender, count)
        assert all(p.status == Status.SUCCESS and p.stored for p in psbs)
        seqs = [p.seq for p in psbs]
        assert sorted(seqs) == sorted(set(seqs)) and len(seqs) == count
        assert wire.AnswerBatch in frames  # answers made by one commit shared frames
        assert frames.count(wire.AnswerBatch) + frames.count(wire.PutDone) < count
        assert len(answered) == len(set(answered))  # no request answered twice

        with trio.fail_after(30):
            assert len(await read_all(address, count)) == count
        async with connect(address, "ANYORDER") as receiver:
            with pytest.raises(NoMoreMessages):  # every confirm was recorded
                await receiver.get_many(1, timeout=0)
        nursery.cancel_scope.cancel()


async def test_a_client_whose_hello_reads_no_batches_gets_one_frame_per_answer(
    tmp_path: Path,
) -> None:
    count = 100
    async with trio.open_nursery() as nursery:
        address = await started(nursery, tmp_path)
        host, port = address.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        old = FramedStream(stream, wire.Connection("client"))
        await old.send_now(wire.Hello(wire.PROTOCOL_VERSION, "older client"))
        assert isinstance(await old.next_event(timeout_s=10), wire.Welcome)
        await old.send_now(wire.Attach(1, "SENDER"))
        assert isinstance(await old.next_event(timeout_s=10), wire.Attached)
        wf, dlj = int(DeliveryMode.WF_DQF), int(Uma.DLJ)
        old.send(
            wire.PutBatch(
                [
                    wire.Put(2 + n, "ANYORDER", b"x", wf, dlj, 0, 0, 0, 0, b"", "")
                    for n in range(count)
                ]
            )
        )
        await old.flush()
        with trio.fail_after(30):
            got = [await old.next_event() for _ in range(count)]
        assert {type(event) for event in got} == {wire.PutDone}
        assert sorted(event.request_id for event in got) == list(range(2, count + 2))
        assert all(event.delivery_status == Status.STORED for event in got)
        await stream.aclose()
        nursery.cancel_scope.cancel()


def put(request_id: int, body: bytes = b"x") -> wire.Put:
    return wire.Put(request_id, "1.11", body, 21, 4, 0, 0, 0, 0, b"", "")


async def test_puts_queued_together_go_in_one_put_batch_in_order_with_other_frames() -> None:
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        for request_id in (1, 2, 3):
            client.send_put(put(request_id), 100)
        client.send(wire.Confirm(4, 1, 0, 0))
        client.send_put(put(5), 100)
        await client.flush()
        with trio.fail_after(10):
            got = [await server.next_event() for _ in range(3)]
        assert got == [wire.PutBatch([put(1), put(2), put(3)]), wire.Confirm(4, 1, 0, 0), put(5)]
        nursery.cancel_scope.cancel()


def shape(event: object) -> tuple:
    """An event's type and the request ids it carries (bodies left out of diffs)."""
    if type(event) is wire.PutBatch:
        return ("PutBatch", [p.request_id for p in event.puts])
    return (type(event).__name__, [event.request_id])


async def test_a_put_group_stays_within_put_group_bytes_max_and_a_big_put_goes_alone() -> None:
    body = bytes(PUT_GROUP_BYTES_MAX // 3)
    big = bytes(PUT_GROUP_BYTES_MAX + 1)
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        for request_id in (1, 2, 3, 4):
            client.send_put(put(request_id, body), len(body) + 100)
        client.send_put(put(5, big), len(big) + 100)
        client.send_put(put(6), 100)
        nursery.start_soon(client.flush)
        with trio.fail_after(10):
            got = [shape(await server.next_event()) for _ in range(4)]
        assert got == [
            ("PutBatch", [1, 2]),
            ("PutBatch", [3, 4]),
            ("Put", [5]),
            ("Put", [6]),
        ]
        nursery.cancel_scope.cancel()


async def recording_proxy(nursery: trio.Nursery, address: str, seen: list[type]) -> str:
    """A TCP proxy to `address` that records the type of every frame the client sends."""
    host, port = address.rsplit(":", 1)

    async def relay(source: trio.SocketStream, sink: trio.SocketStream, read=None) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await source.receive_some(1 << 16):
                if read is not None:
                    read.receive_data(data)
                    seen.extend(type(event) for event in read.events())
                await sink.send_all(data)
        await sink.aclose()

    async def handle(client_side: trio.SocketStream) -> None:
        server_side = await trio.open_tcp_stream(host, int(port))
        async with trio.open_nursery() as pair:
            pair.start_soon(relay, client_side, server_side, wire.Connection("server"))
            pair.start_soon(relay, server_side, client_side)

    (listener,) = await nursery.start(
        functools.partial(trio.serve_tcp, host="127.0.0.1"), handle, 0
    )
    return f"127.0.0.1:{listener.socket.getsockname()[1]}"


async def test_a_client_sends_puts_made_together_in_put_batches_and_each_is_stored(
    tmp_path: Path,
) -> None:
    count = 300
    async with trio.open_nursery() as nursery:
        seen: list[type] = []
        address = await recording_proxy(nursery, await started(nursery, tmp_path), seen)
        async with connect(address, "SENDER") as sender:
            with trio.fail_after(30):
                psbs = await put_all(sender, count)
            bodies = sorted(int(m.body) for m in await read_all(address, count))
        assert all(p.status == Status.SUCCESS and p.stored for p in psbs)
        assert len({p.seq for p in psbs}) == count
        assert wire.PutBatch in seen
        assert seen.count(wire.PutBatch) + seen.count(wire.Put) < count
        assert bodies == list(range(count))  # every put stored, none twice
        nursery.cancel_scope.cancel()


async def read_all(address: str, count: int) -> list:
    async with connect(address, "ANYORDER") as receiver:
        messages = await receiver.get_many(count, timeout=5)
        assert await receiver.confirm_many([m.seq for m in messages]) == [None] * len(messages)
        return messages


async def put_all(sender, count: int) -> list:
    """`count` WF_DQF puts to ANYORDER from as many tasks at once: their PSBs."""
    psbs: list = []

    async def put_one(index: int) -> None:
        body = b"%d" % index
        psbs.append(await sender.put(body, "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ))

    async with trio.open_nursery() as puts:
        for index in range(count):
            puts.start_soon(put_one, index)
    return psbs
