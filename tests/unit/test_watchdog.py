"""The watchdog's rules under a mock clock: when it pings, when it gives up, and that
a busy pipelined connection never trips the frame deadline."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.config.guards import Guards
from mrs.transport.watchdog import Liveness, watch

GUARDS = Guards(
    heartbeat_interval_s=1.0,
    link_silence_s_max=5.0,
    client_idle_s_max=5.0,
    handshake_s_max=3.0,
    frame_s_max=4.0,
)


async def _watch_while(liveness: Liveness, peer, until_s: float) -> tuple[str | None, list]:
    """Run the watchdog beside a simulated peer until `until_s`; (why it closed, pings)."""
    pings: list[float] = []
    outcome: list[str] = []

    def ping() -> None:
        pings.append(trio.current_time())

    async with trio.open_nursery() as nursery:

        async def run_watch() -> None:
            outcome.append(await watch(liveness, GUARDS, GUARDS.link_silence_s_max, ping))
            nursery.cancel_scope.cancel()

        nursery.start_soon(run_watch)
        nursery.start_soon(peer, pings)
        await trio.sleep(until_s)
        nursery.cancel_scope.cancel()
    return (outcome[0] if outcome else None), pings


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_silent_peer_is_pinged_each_interval_then_given_up(autojump_clock) -> None:
    start = trio.current_time()

    async def silent(pings: list) -> None:
        await trio.sleep_forever()

    why, pings = await _watch_while(Liveness(handshake_done=True), silent, 100)
    assert why is not None and "nothing heard for 5.0 s" in why
    assert [round(at - start, 3) for at in pings] == [1.0, 2.0, 3.0, 4.0]


async def test_a_peer_that_answers_each_ping_is_kept(autojump_clock) -> None:
    liveness = Liveness(handshake_done=True)

    async def answers(pings: list) -> None:
        seen = 0
        while True:
            await trio.sleep(0.05)
            if len(pings) > seen:
                seen = len(pings)
                liveness.heard(buffered_bytes=0, frames=1)

    why, pings = await _watch_while(liveness, answers, 100)
    assert why is None
    assert 90 <= len(pings) <= 100  # one per quiet interval


async def test_no_hello_is_given_up_at_the_handshake_deadline(autojump_clock) -> None:
    start = trio.current_time()
    liveness = Liveness()

    async def chatty_without_hello(pings: list) -> None:
        while True:
            await trio.sleep(0.5)
            liveness.heard(buffered_bytes=3, frames=0)  # bytes, but never a whole Hello

    why, pings = await _watch_while(liveness, chatty_without_hello, 100)
    assert "no handshake" in why
    assert trio.current_time() - start == pytest.approx(3.0)
    assert pings == []  # no Ping before the handshake


@settings(max_examples=50, deadline=None)
@given(
    gaps=st.lists(st.floats(0.01, 3.9), min_size=1, max_size=60),
    partial=st.lists(st.booleans(), min_size=60, max_size=60),
)
def test_frames_that_keep_completing_never_trip_the_frame_deadline(gaps, partial) -> None:
    """A pipelining client's reads often end mid-frame; as long as each read completes
    some frame, no frame is older than the gap between reads (< frame_s_max)."""

    async def main() -> str | None:
        liveness = Liveness(handshake_done=True)

        async def busy(pings: list) -> None:
            for gap, ends_mid_frame in zip(gaps, partial, strict=False):
                await trio.sleep(gap)
                liveness.heard(buffered_bytes=100 if ends_mid_frame else 0, frames=3)
            liveness.heard(buffered_bytes=0, frames=1)
            await trio.sleep_forever()

        why, _ = await _watch_while(liveness, busy, sum(gaps) + 1)
        return why

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) is None


async def test_a_frame_dripped_without_completing_is_cut_at_frame_s_max(autojump_clock) -> None:
    liveness = Liveness(handshake_done=True)
    start = trio.current_time()

    async def drip(pings: list) -> None:
        await trio.sleep(1.0)
        while True:
            liveness.heard(buffered_bytes=10, frames=0)
            await trio.sleep(0.5)

    why, _ = await _watch_while(liveness, drip, 100)
    assert "frame stayed unfinished" in why
    assert trio.current_time() - start == pytest.approx(1.0 + GUARDS.frame_s_max)
