"""The lookups that replaced enum calls and parsing on the client's per-answer path
(issue 17) give exactly what the slow forms gave: `status_of` as `Status(value)` (the
raw int when unknown), a delivery's addresses as `Address.parse` (with its errors), its
mode as `DeliveryMode(value)`; and the address cache stays bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients import pending
from mrs.model import Address, DeliveryMode, Status, delivery_mode_of, status_of


def _status_slow(value: int) -> Status | int:
    try:
        return Status(value)
    except ValueError:
        return value


@given(
    st.one_of(st.sampled_from([member.value for member in Status]), st.integers(-(2**63), 2**63))
)
def test_status_of_is_the_enum_lookup(value: int) -> None:
    got = status_of(value)
    assert got == _status_slow(value)
    assert type(got) is type(_status_slow(value))


@given(st.one_of(st.from_regex(r"\A[0-9]{1,5}\.[0-9]{1,5}\Z"), st.text(max_size=12)))
def test_a_delivery_address_is_what_parse_gives(text: str) -> None:
    try:
        expected = Address.parse(text)
    except ValueError:
        with pytest.raises(ValueError):
            pending._address(text)
        return
    assert pending._address(text) == expected
    assert pending._address(text) == expected  # and again, from the cache


def test_the_address_cache_is_bounded() -> None:
    for queue in range(pending.ADDRESSES_CACHED_MAX + 10):
        assert pending._address(f"1.{queue}") == Address(1, queue)
    assert pending._address.cache_info().currsize <= pending.ADDRESSES_CACHED_MAX


def test_delivery_mode_lookup_matches_the_enum() -> None:
    for mode in DeliveryMode:
        assert delivery_mode_of(int(mode)) is mode
    with pytest.raises(ValueError):
        delivery_mode_of(12345)


def test_the_old_import_paths_of_the_split_client_still_work() -> None:
    """clients/connection.py was split (issue 14); code that imported from it keeps working."""
    import clients
    from clients.connection import (
        CLIENT_SAF_SEQ_HEADER,
        IDEMPOTENCY_HEADER,
        Client,
        JournalEvent,
        connect,
    )

    assert connect is clients.connect
    assert (Client, JournalEvent) == (clients.Client, clients.JournalEvent)
    assert (IDEMPOTENCY_HEADER, CLIENT_SAF_SEQ_HEADER) == ("idempotency_key", "client_saf_seq")
    with pytest.raises(AttributeError):
        import clients.connection as module

        module.no_such_name  # noqa: B018 - the lookup itself is the test


def test_every_field_of_a_delivery_lands_in_its_message_field() -> None:
    """`Requests.message` builds the Message positionally (cheaper than by keyword): each
    Delivery field must still reach the Message field of the same meaning."""
    from clients.connection import Client
    from mrs import protocol as wire

    client = Client("127.0.0.1:1", "ORDERS", "test")
    delivery = wire.Delivery(
        7,  # request id: not the message's
        123_456,
        b"body",
        "1.13",
        "1.10",
        5,
        -6,
        3,
        int(DeliveryMode.WF_DQF),
        int(Status.POSSDUPL),
        b"corr",
        1_700_000_000_000_000_000,
        {"reason": 1},
        {"header": "value"},
    )
    message = client._requests.message(delivery)
    assert (message.body, message.seq) == (b"body", 123_456)
    assert (message.source, message.target) == (Address(1, 13), Address(1, 10))
    assert (message.msg_class, message.msg_type, message.priority) == (5, -6, 3)
    assert message.delivery is DeliveryMode.WF_DQF
    assert message.delivery_status is Status.POSSDUPL
    assert message.correlation_id == b"corr"
    assert message.put_time_ns == 1_700_000_000_000_000_000
    assert message.dead_letter_header == {"reason": 1}
    assert message.headers == {"header": "value"}
    assert message._confirm == client.confirm  # message.confirm() confirms on this client
