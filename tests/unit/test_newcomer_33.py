"""A newcomer's typos, refused in one line before anything is dialed (thirty-third
session's walk-through of the docs)."""

from __future__ import annotations

import pytest
import trio

from clients import Address, BadParameter, FieldRefused, Message, connect
from clients.requests import confirm_request, put_request
from mrs.model import DeliveryMode, ForceJrn, Uma


class Recording:
    """Notes every dial; none must happen."""

    def __init__(self) -> None:
        self.dialled: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> trio.abc.Stream:
        self.dialled.append((host, port))
        raise ConnectionRefusedError(111, "Connection refused")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:70011",  # a digit too many: was "nothing listens there; is the server running?"
        "http://127.0.0.1:7001",  # was "cannot resolve the host name"
        "127.0.0.1:7²",  # was a bare ValueError from int()
        "127.0.0.1:" + "9" * 5000,  # was a bare ValueError (int's digit limit)
    ],
)
async def test_an_address_no_server_can_have_is_badparam_not_a_server_down(address) -> None:
    recording = Recording()
    with pytest.raises(BadParameter, match=r"HOST:PORT \(a port up to 65535, no URL scheme\)"):
        async with connect(address, "ORDERS", open_stream=recording):
            pass
    assert recording.dialled == []


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("delivery", "WF_DQF", "delivery must be a DeliveryMode"),
        ("uma", "DLJ", "uma must be a Uma"),
        ("force_j", "FORCE_JRN", "force_j must be a ForceJrn"),
    ],
)
def test_a_mode_given_by_its_name_is_refused_naming_the_enum_to_use(field, value, named) -> None:
    """`put(..., delivery="WF_DQF")` was refused "delivery must be one of its enum's
    members": which enum, a newcomer had to guess."""
    put = {"delivery": DeliveryMode.WF_DQF, "uma": Uma.DLJ, field: value}
    with pytest.raises(FieldRefused, match=named):
        if field == "force_j":
            confirm_request(1, 5, 0, value)
        else:
            put_request(1, "1.10", b"x", put["delivery"], put["uma"], 0, 0, 0, 0, b"", "", None)


def test_a_message_given_to_confirm_whole_is_refused_saying_to_give_its_seq() -> None:
    """`q.confirm(message)` was refused "Confirm.seq must be an int, got Message"."""
    message = Message(body=b"x", seq=5, source=Address(1, 11), target=Address(1, 10))
    with pytest.raises(FieldRefused, match=r"confirm\(message\.seq\), or message\.confirm\(\)"):
        confirm_request(1, message, 0, ForceJrn.DEFAULT_JRN)
