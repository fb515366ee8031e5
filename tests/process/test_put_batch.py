"""The batch put frame (PutBatch) and `Client.put_many`: many puts in one frame, one
commit, every put answered on its own.

Protocol round trips and bounds are pure; the put_many tests run against a real
`mrs serve` process (tests/conftest.py `make_bus`).
"""

from __future__ import annotations

import signal
import struct

import msgpack
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import (
    ConnectionLost,
    DeliveryMode,
    FieldRefused,
    KeyReused,
    MrsError,
    NoSuchQueue,
    Psb,
    PutItem,
    PutOutcomeUnknown,
    Status,
    connect,
)
from clients.batch import frames, wire_bytes
from journals import Journal, JournalStore
from mrs import protocol as wire
from mrs.limits import PUT_BATCH_BYTES_MAX, PUT_BATCH_ITEMS_MAX


def open_pair() -> tuple[wire.Connection, wire.Connection]:
    client, server = wire.Connection("client"), wire.Connection("server")
    server.receive_data(client.send(wire.Hello(wire.PROTOCOL_VERSION, "test")))
    assert isinstance(server.next_event(), wire.Hello)
    client.receive_data(server.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "G1")))
    assert isinstance(client.next_event(), wire.Welcome)
    return client, server


def put(request_id: int, body: bytes = b"x", **fields) -> wire.Put:
    values = {
        "target": "1.10",
        "delivery": int(DeliveryMode.WF_DQF),
        "uma": 0,
        "msg_class": 0,
        "msg_type": 0,
        "priority": 0,
        "timeout_ms": 0,
        "correlation_id": b"",
        "resp_q": "",
        "headers": None,
    }
    values.update(fields)
    return wire.Put(request_id, body=body, **values)


def raw_frame(obj: object) -> bytes:
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


def raw_put(request_id: int, priority: int = 0, body: bytes = b"x") -> list:
    return [wire.Put.code, request_id, "1.10", body, 26, 0, 0, 0, priority, 0, b"", ""]


def refusal(frame: bytes) -> str:
    _client, server = open_pair()
    server.receive_data(frame)
    with pytest.raises(wire.RemoteProtocolError) as caught:
        server.next_event()
    return caught.value.message


# ---------------------------------------------------------------------- protocol
_headers = st.none() | st.dictionaries(
    st.text(max_size=8), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20), max_size=3
)
_put_fields = st.fixed_dictionaries(
    {
        "body": st.binary(max_size=300),
        "target": st.text(max_size=12),
        "priority": st.integers(0, 99),
        "msg_type": st.integers(-(2**63), 2**63 - 1),
        "correlation_id": st.binary(max_size=32),
        "headers": _headers,
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_put_fields, min_size=1, max_size=40))
def test_a_put_batch_round_trips_and_every_put_is_in_flight(items: list[dict]) -> None:
    client, server = open_pair()
    batch = wire.PutBatch([put(index + 1, **fields) for index, fields in enumerate(items)])
    server.receive_data(client.send(batch))
    assert server.next_event() == batch
    assert client.our_requests_in_flight == server.their_requests_in_flight == len(items)
    for one in batch.puts:  # each answered on its own frees its own id
        client.receive_data(server.send(wire.PutDone(one.request_id, 1, 1, 7, 1)))
        assert isinstance(client.next_event(), wire.PutDone)
    assert client.our_requests_in_flight == server.their_requests_in_flight == 0


def test_a_batch_beyond_its_bounds_is_refused_where_it_is_built_naming_the_bound() -> None:
    with pytest.raises(wire.LocalProtocolError, match=r"PutBatch.puts must hold 1..1000 items"):
        wire.PutBatch([put(i) for i in range(1, PUT_BATCH_ITEMS_MAX + 2)])
    with pytest.raises(wire.LocalProtocolError, match=r"got 0"):
        wire.PutBatch([])
    half = b"b" * (PUT_BATCH_BYTES_MAX // 2 + 1)
    with pytest.raises(wire.LocalProtocolError, match=r"bytes of bodies, more than"):
        wire.PutBatch([put(1, half), put(2, half)])


@pytest.mark.parametrize(
    "obj, wording",
    [
        (
            [wire.PutBatch.code, [raw_put(i) for i in range(1, PUT_BATCH_ITEMS_MAX + 2)]],
            "PutBatch.puts must hold 1..1000 items, got 1001",
        ),
        (
            [wire.PutBatch.code, [raw_put(1), raw_put(2, priority=120)]],
            "PutBatch.puts[1].priority must be 0..99, got 120",
        ),
        ([wire.PutBatch.code, [raw_put(1), [13, 1]]], "PutBatch.puts[1] must be a Put"),
        (
            [wire.PutBatch.code, [raw_put(i, body=b"b" * (1 << 19)) for i in (1, 2, 3)]],
            "PutBatch.puts hold 1572864 bytes of bodies, more than PUT_BATCH_BYTES_MAX",
        ),
        ([wire.PutBatch.code, [raw_put(4), raw_put(4)]], "request_id 4 reused while in flight"),
    ],
    ids=["too-many", "bad-item", "not-a-put", "too-many-bytes", "id-twice"],
)
def test_a_bad_batch_frame_is_refused_with_the_field_named(obj, wording) -> None:
    assert refusal(raw_frame(obj)).startswith(wording)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=3000))
def test_frames_keep_order_and_both_bounds(sizes: list[int]) -> None:
    puts = [(index, put(index + 1, b"b" * size)) for index, size in enumerate(sizes)]
    split = frames(puts)
    assert [index for frame in split for index, _ in frame] == list(range(len(sizes)))
    for frame in split:
        assert len(frame) <= PUT_BATCH_ITEMS_MAX
        if len(frame) > 1:  # a put bigger than the bound travels alone
            assert sum(wire_bytes(one) for _, one in frame) <= PUT_BATCH_BYTES_MAX
            wire.PutBatch([one for _, one in frame])  # and the server would take it


# ---------------------------------------------------------------------- put_many
async def test_put_many_answers_each_item_and_one_refusal_fails_no_other(make_bus) -> None:
    bus = make_bus()
    async with connect(bus.address, queue="SENDER") as sender:
        first = await sender.put(b"keyed", "ORDERS", headers={"idempotency_key": "k1"})
        items = [
            PutItem(b"one", "ANYORDER"),
            PutItem(b"other body", "ORDERS", headers={"idempotency_key": "k1"}),  # KEY_REUSED
            PutItem(b"two", "9.99"),  # no such group: refused
            PutItem(b"three", "ANYORDER", priority=150),  # never leaves: FieldRefused
            PutItem(b"four", "ANYORDER", delivery=DeliveryMode.NN_MEM),
            PutItem(b"keyed", "ORDERS", headers={"idempotency_key": "k1"}),  # duplicate
            PutItem(b"five", "ANYORDER", correlation_id=b"c5"),
        ]
        results = await sender.put_many(items)
    assert len(results) == len(items)
    stored = [results[i] for i in (0, 6)]
    assert all(isinstance(psb, Psb) and psb.delivery_status == Status.STORED for psb in stored)
    assert isinstance(results[1], KeyReused)
    assert isinstance(results[2], MrsError) and not isinstance(results[2], FieldRefused)
    assert isinstance(results[3], FieldRefused) and "priority" in results[3].message
    assert isinstance(results[4], Psb) and results[4].status == Status.SUCCESS
    assert isinstance(results[5], Psb) and results[5].seq == first.seq  # the first copy's
    async with connect(bus.address, queue="ANYORDER") as receiver:
        bodies = []
        for _ in range(3):
            message = await receiver.get(timeout=10)
            bodies.append(message.body)
            if message.needs_confirm:
                await receiver.confirm(message.seq)
    assert sorted(bodies) == [b"five", b"four", b"one"]


async def test_put_many_of_more_than_one_frame_stores_every_item_once_in_order(make_bus) -> None:
    count = PUT_BATCH_ITEMS_MAX + 300
    bus = make_bus(limits=f"dqf_messages_max = {count + 10}")
    async with connect(bus.address, queue="SENDER") as sender:
        results = await sender.put_many(
            [PutItem(f"m{index}".encode(), "ORDERS") for index in range(count)]
        )
    assert all(isinstance(psb, Psb) and psb.stored for psb in results), {
        type(r).__name__ for r in results
    }
    seqs = [psb.seq for psb in results]
    assert seqs == sorted(seqs) and len(set(seqs)) == count
    store = JournalStore(bus.data_dir / "journals", readonly=True)
    try:  # what was answered STORED is in the DQF on disk, once, in order
        stored = [(record.seq, record.body) for _key, record in store.scan(Journal.DQF)]
    finally:
        store.close()
    assert stored == [(seq, f"m{index}".encode()) for index, seq in enumerate(seqs)]


async def test_put_many_to_an_unknown_queue_name_refuses_that_item_alone(make_bus) -> None:
    bus = make_bus()
    async with connect(bus.address, queue="SENDER") as sender:
        results = await sender.put_many([PutItem(b"a", "NOWHERE"), PutItem(b"b", "ORDERS")])
    assert isinstance(results[0], NoSuchQueue)
    assert isinstance(results[1], Psb) and results[1].stored


async def test_put_many_after_the_connection_dropped_answers_each_put_outcome_unknown(
    make_bus,
) -> None:
    """Sent and never answered (the server frozen, then killed): every put of the
    batch is a PutOutcomeUnknown in its place, nothing is raised, nothing is lost
    silently; a put_many with no connection at all raises ConnectionLost."""
    bus = make_bus()
    async with connect(bus.address, queue="SENDER", reconnect=None) as sender:
        bus.process.process.send_signal(signal.SIGSTOP)  # reads nothing, answers nothing
        try:
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    results: list = []

                    async def put_them() -> None:
                        results.extend(
                            await sender.put_many([PutItem(b"x", "ORDERS") for _ in range(50)])
                        )

                    nursery.start_soon(put_them)
                    await trio.sleep(0.05)
                    while sender._requests.link.unsent:  # until the batch is on the wire
                        await trio.sleep(0.01)
                    bus.process.process.send_signal(signal.SIGKILL)
        finally:
            bus.process.process.wait()
        assert len(results) == 50
        assert all(isinstance(result, PutOutcomeUnknown) for result in results)
        with pytest.raises(ConnectionLost):
            await sender.put_many([PutItem(b"y", "ORDERS")])
