"""A hostile but authenticated client against a real `mrs serve`: selective gets that
match nothing, parked by the hundred or sent by the hundred in one write, must not hold
the group's loop (and every other client's answer) for seconds; and one reader of the
shared DLQ parking gets must not have the other readers' gets refused."""

from __future__ import annotations

import socket
import time

from clients import DeliveryMode, PutItem, Status, Uma, connect_sync
from mrs import protocol as wire
from tests.process.test_flood_limits import _frames, _raw, _requests, guards

NEVER = [["msg_type", "eq", 2]]
"""A selection of a key the index does not hold (a scan) that no message here matches."""


def _fill(address: str, count: int, delivery: DeliveryMode) -> None:
    """`count` messages of msg_type 1 waiting on ANYORDER."""
    with connect_sync(address, "SENDER") as client:
        for _ in range(0, count, 1000):
            items = [
                PutItem(b"x", "ANYORDER", delivery=delivery, uma=Uma.DISC, msg_type=1)
                for _ in range(1000)
            ]
            assert not [r for r in client.put_many(items) if isinstance(r, Exception)]


def _sent(*events: object) -> bytes:
    """Frames of `events` from a client past its Hello (sent before on that socket)."""
    client = wire.Connection("client")
    client.send(wire.Hello(wire.PROTOCOL_VERSION, "raw"))
    return client.send_many(list(events))


def _answers(sock: socket.socket, count: int) -> list:
    frames = _frames(sock, count)
    assert len(frames) == count, frames[-3:]
    return frames


def _get_and_confirm(sock: socket.socket, first_id: int, count: int) -> float:
    """Seconds `count` gets of a message waiting, each confirmed in turn, took."""
    started = time.monotonic()
    for request_id in range(first_id, first_id + count):
        sock.sendall(_sent(wire.Get(request_id, 0)))
        delivery = _answers(sock, 1)[0]
        assert delivery[0] == wire.Delivery.code, delivery
        sock.sendall(_sent(wire.Confirm(request_id + 100, delivery[2], 0, 0)))
        assert _answers(sock, 1)[0][:2] == [wire.Confirmed.code, request_id + 100]
    return time.monotonic() - started


def test_a_confirm_beside_parked_selective_gets_does_not_rescan_them(make_bus) -> None:
    """Each confirm served the queue's parked gets, and every parked selective get
    looked again through the waiting messages: 1,000 of them parked beside 10,000
    messages stalled the group ~5 s at each confirm, every client's answer with it.
    Now a parked selective get looks again only when a message came back; a message
    that arrives is still matched against it."""
    bus = make_bus()
    _fill(bus.address, 3000, DeliveryMode.WF_DQF)
    parked = [wire.Get(request_id, -1, [*NEVER] * 8) for request_id in range(2, 302)]
    with _raw(bus.address, _requests(wire.Attach(1, "ANYORDER"))) as sock:
        _answers(sock, 2)
        alone_s = _get_and_confirm(sock, 500, 5)
        started = time.monotonic()
        sock.sendall(_sent(*parked, wire.Locate(400, "ORDERS")))
        assert _answers(sock, 1)[0][0] == wire.Located.code  # all 300 parked
        parking_s = time.monotonic() - started
        beside_s = _get_and_confirm(sock, 510, 5)
        # Before: each of the 5 confirms also cost what parking the 300 gets did.
        assert beside_s < alone_s + parking_s, (beside_s, alone_s, parking_s)
        with connect_sync(bus.address, "SENDER") as sender:
            sender.put(b"match", target="ANYORDER", delivery=DeliveryMode.WF_DQF,
                       uma=Uma.DISC, msg_type=2)  # fmt: skip
        delivery = _answers(sock, 1)[0]
        assert (delivery[0], delivery[1], delivery[3]) == (wire.Delivery.code, 2, b"match")


def test_selective_gets_in_one_write_let_other_clients_go_first(make_bus) -> None:
    """A round of one connection's requests is what one receive brings (64 KiB), and
    a selective get that matches nothing looks at up to 10,000 messages: 1,000 of them
    in one write held the loop, and every other client's answer, for 2 s. Now a
    connection's round ends once its selective gets looked at 20,000 messages, and
    the others go first."""
    bus = make_bus()
    _fill(bus.address, 5000, DeliveryMode.WF_MEM)
    with _raw(bus.address, _requests(wire.Attach(1, "ANYORDER"))) as sock, \
            _raw(bus.address, _requests()) as other:  # fmt: skip
        _answers(sock, 2)
        _answers(other, 1)
        gets = [wire.Get(request_id, 0, NEVER) for request_id in range(2, 402)]
        started = time.monotonic()
        sock.sendall(_sent(*gets))
        time.sleep(0.02)  # the server is in the flood's round
        asked = time.monotonic()
        other.sendall(_sent(wire.Locate(2, "ORDERS")))
        assert _answers(other, 1)[0][0] == wire.Located.code
        other_s = time.monotonic() - asked
        assert [frame[2] for frame in _answers(sock, 400)] == [Status.NOMOREMSG] * 400
        flood_s = time.monotonic() - started
        assert other_s < flood_s / 2, (other_s, flood_s)


def test_a_dlq_reader_parking_gets_does_not_refuse_the_other_readers(make_bus) -> None:
    """parked_gets_max is per connection, but on the shared DLQ it counted every
    reader's parked gets: one reader's gets had the DLQ handler's refused EXCEEDQUOTA."""
    bus = make_bus(group_extra=guards(parked_gets_max=3))
    parked = [wire.Get(request_id, -1) for request_id in range(2, 5)]
    with _raw(bus.address, _requests(wire.Attach(1, "DLQ"), *parked)) as flooder:
        _answers(flooder, 2)
        other = _requests(wire.Attach(1, "DLQ"), *[wire.Get(i, 300) for i in range(2, 6)])
        with _raw(bus.address, other) as reader:
            *_, refused, first = _answers(reader, 4)
    # gets 2..4 parked and timed out; get 5 was its own fourth
    assert (refused[0], refused[1], refused[2]) == (wire.Failure.code, 5, Status.EXCEEDQUOTA)
    assert "3 gets parked" in refused[3]
    assert (first[0], first[1], first[2]) == (wire.Failure.code, 2, Status.TIMEOUT)


def _cancels_s(sock: socket.socket, first_id: int) -> float:
    """Seconds the group took over 10,000 CancelGets of gets never sent (then a Locate)."""
    cancels = [wire.CancelGet(request_id) for request_id in range(first_id, first_id + 10_000)]
    started = time.monotonic()
    sock.sendall(_sent(*cancels, wire.Locate(first_id - 1, "ORDERS")))
    assert _answers(sock, 1)[0][:2] == [wire.Located.code, first_id - 1]
    return time.monotonic() - started


def test_cancels_of_gets_not_waiting_do_not_look_through_the_parked_ones(make_bus) -> None:
    """A CancelGet looked through every get parked on the queue for its request id:
    a client with 1,000 gets parked sending cancels of ids never sent (no answer, so
    nothing slows it) held the group's loop 0.5 s per 15,000. Only a get in flight
    is looked for now."""
    bus = make_bus()
    with _raw(bus.address, _requests(wire.Attach(1, "ANYORDER"))) as sock:
        _answers(sock, 2)
        alone_s = _cancels_s(sock, 100_000)
        sock.sendall(_sent(*[wire.Get(request_id, -1) for request_id in range(2, 1002)]))
        beside_s = _cancels_s(sock, 200_000)
    # Before: 0.5 s against 0.03 s alone.
    assert beside_s < 3 * alone_s + 0.1, (beside_s, alone_s)
