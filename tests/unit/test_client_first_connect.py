"""`connect`'s first link to a replicated group (clients.dialing `Dialer.open_first`):
while no instance answers (a failover under way) it keeps trying them for
`connect_timeout_s`, then fails as before; one address fails at once."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from clients import ConnectionLost, connect


class Refusing:
    """Every dial refused, as when nothing listens; the dials are noted with the time."""

    def __init__(self) -> None:
        self.dialled: list[tuple[float, int]] = []

    async def __call__(self, host: str, port: int) -> trio.abc.Stream:
        self.dialled.append((trio.current_time(), port))
        raise ConnectionRefusedError(111, "Connection refused")


async def _first_connect(addresses: list[str], refusing: Refusing, **options) -> float:
    """The virtual time `connect` took to give up (it must)."""
    started_s = trio.current_time()
    with pytest.raises(ConnectionLost) as lost:
        async with connect(addresses, "ORDERS", open_stream=refusing, **options):
            pass
    assert "cannot connect to" in str(lost.value)
    return trio.current_time() - started_s


def test_a_replicated_groups_first_connect_waits_for_an_active_then_gives_up() -> None:
    refusing = Refusing()

    async def scenario() -> float:
        return await _first_connect(["h:1", "h:2", "h:3"], refusing, connect_timeout_s=5)

    took_s = trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    assert 3 <= took_s <= 5  # the backoff's last wait that still fits, then no more
    assert {port for _, port in refusing.dialled} == {1, 2, 3}
    assert len(refusing.dialled) > 3 * 3  # several rounds of the three


def test_one_address_or_reconnecting_off_fails_at_once() -> None:
    for addresses, options in ((["h:1"], {}), (["h:1", "h:2"], {"reconnect": None})):
        refusing = Refusing()

        async def scenario() -> float:
            return await _first_connect(addresses, refusing, connect_timeout_s=5, **options)  # noqa: B023

        took_s = trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
        assert took_s == 0 and len(refusing.dialled) == len(addresses)
