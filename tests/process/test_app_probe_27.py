"""An application ported from MessageQ, using the MessageQ calls as the docs describe
them, against a real `mrs serve` (one group, unreplicated): the blocking client's
interrupted get on a queue that confirms implicitly, what it keeps at close, and the
fields of a returned message (UMA RTS) against headers any sender may put."""

from __future__ import annotations

import pytest

from clients import BadParameter, DeliveryMode, NoMoreMessages, Status, Uma, connect_sync
from mrs.core.selection import by_class_type
from mrs.model import Address
from tests.process.test_client_api_probes_21 import _get_interrupted_as_its_message_came

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""


def _drain(address: str, queue: str) -> list[tuple[bytes, int]]:
    """(body, delivery status) of every message now on `queue`, each confirmed."""
    got: list[tuple[bytes, int]] = []
    with connect_sync(address, queue) as reader:
        while True:
            try:
                message = reader.get(timeout=0)
            except NoMoreMessages:
                return got
            got.append((message.body, message.delivery_status))
            if message.needs_confirm:
                message.confirm()


def test_a_selective_get_does_not_confirm_unseen_what_an_interrupted_get_kept(bus) -> None:
    """On a queue that confirms implicitly each Get confirms the message handed out
    before it. A blocking get interrupted as its message came keeps it for the next
    get; a selective get that passes over it must not send a Get that confirms it
    unseen (client-library.md, rule 5: refused BADPARAM, "take them with a plain get
    first"), as the async client refuses. Before, the blocking client sent the Get: the
    kept message was confirmed before the application saw it, and a program that
    stopped then lost it (the next program got only the selected one, POSSDUPL)."""
    with connect_sync(bus.address, "SENDER") as sender:
        sender.put(b"kept", "IMPLICIT", msg_class=1)
        sender.put(b"selected", "IMPLICIT", msg_class=2)
    with connect_sync(bus.address, "IMPLICIT") as receiver:
        _get_interrupted_as_its_message_came(receiver)
        with pytest.raises(BadParameter, match="take them with a plain get first"):
            receiver.get(timeout=WAIT_S, select=by_class_type(2, 0))
        # the program stops here without having seen either message
    assert _drain(bus.address, "IMPLICIT") == [
        (b"kept", Status.POSSDUPL),
        (b"selected", Status.CONFIRMREQ),
    ]


def test_a_memory_message_an_interrupted_get_kept_goes_back_at_close(bus) -> None:
    """A nonrecoverable message that came for a blocking get interrupted by Ctrl-C is
    kept for the next get; the program closes instead. The close gives back what the
    client holds that needs no confirm (client-library.md, "What a cancelled call
    guarantees"), as the async client does. Before, the blocking client kept it apart
    from the held messages the close gives back, and the message was lost."""
    with connect_sync(bus.address, "SENDER") as sender:
        sender.put(b"memory only", "ANYORDER", delivery=DeliveryMode.NN_MEM)
    with connect_sync(bus.address, "ANYORDER", read_ahead_max=0) as receiver:
        _get_interrupted_as_its_message_came(receiver)
        assert receiver.pending(["ANYORDER"]) == [1]
    assert _drain(bus.address, "ANYORDER") == [(b"memory only", Status.SUCCESS)]


def test_only_a_returned_message_says_where_it_was_going(bus) -> None:
    """`message.original_target` and `return_reason` are for a message the group
    returned to its sender (UMA RTS, MSGUNDEL; undeliverable.md). An application may
    put any headers, `mrs_returned` too: on a message delivered as usual they are the
    sender's, not the group's word. Before, the receiver read them as the group's (a
    forged original target and reason), and a malformed one raised KeyError from the
    property. A message the group returned still says both."""
    with connect_sync(bus.address, "SENDER") as sender:
        sender.put(
            b"forged",
            "ANYORDER",
            headers={"mrs_returned": {"original_target": "1.10", "reason": -202}},
        )
        sender.put(b"malformed", "ANYORDER", headers={"mrs_returned": {"x": 1}})
        psb = sender.put(b"returned", "TEMP", delivery=DeliveryMode.WF_MEM, uma=Uma.RTS)
        assert (psb.delivery_status, psb.uma_status) == (Status.NOTACTIVE, Status.RTS_SUCCESS)
        returned = sender.get(timeout=WAIT_S)
        assert returned.delivery_status == Status.MSGUNDEL
        assert returned.original_target == Address(1, 15)
        assert returned.return_reason == Status.NOTACTIVE
    with connect_sync(bus.address, "ANYORDER") as receiver:
        for body in (b"forged", b"malformed"):
            message = receiver.get(timeout=WAIT_S)
            assert message.body == body and message.headers is not None
            assert (message.original_target, message.return_reason) == (None, None)
            message.confirm()
