"""Probes of the client API against the MessageQ reference (messageq-constants.md,
messageq-recoverable-messaging.txt) as a developer porting a pams_* application calls
it: a `pams_set_select`-style selection built the way a Python caller first writes it.
Against a real `mrs serve` over real sockets."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from clients import BadParameter, DeliveryMode, Uma
from mrs.core.selection import Key, Selection

WAIT_S = 10.0
"""Deadline for a get of a message that is already stored."""

MISTAKES: dict[str, Callable[[], Selection]] = {
    "keys as one list": lambda: Selection([Key("correlation_id", "eq", b"reply 2")]),
    "a key as a bare tuple": lambda: Selection(("correlation_id", "eq", b"reply 2")),
    "an operator that is a list": lambda: Selection(Key("priority", ["eq"], 0)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
async def test_a_selection_built_from_a_list_is_one_bad_parameter(make_bus, mistake: str) -> None:
    """docs/delivery-modes.md: "A malformed selection raises BadParameter (BADPARAM, one
    line) where it is built". Keys given as one list (the dataclass field is a tuple of
    keys, the repr shows `keys=(...)`) raised AttributeError ("'list' object has no
    attribute 'attribute'"), and a list operator TypeError (unhashable): a traceback for
    a mistake the caller can fix. Refused BADPARAM, the same selection built right
    finds its message on a real group."""
    bus = make_bus()
    async with bus.connect("SENDER") as sender, bus.connect("ANYORDER") as receiver:
        for number in range(3):
            await sender.put(
                b"reply %d" % number,
                target="ANYORDER",
                delivery=DeliveryMode.WF_DQF,
                uma=Uma.DISC,
                correlation_id=b"reply %d" % number,
            )
        with pytest.raises(BadParameter) as refused:
            MISTAKES[mistake]()
        assert str(refused.value).startswith("mrs: BADPARAM: bad selection: ")
        assert "\n" not in str(refused.value)
        if mistake != "an operator that is a list":
            assert "Selection(*keys)" in refused.value.message
        message = await receiver.get(
            timeout=WAIT_S, select=Selection(Key("correlation_id", "eq", b"reply 2"))
        )
        assert message.body == b"reply 2"
        await receiver.confirm(message.seq)
