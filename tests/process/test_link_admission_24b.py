"""The accepting side of a link admits a Hello without the journals' incarnation only
from a peer whose links never brought one (mrs.group.incarnation), as the dialing side
takes a Welcome; real `mrs serve` processes behind the fault proxy, real sockets, real
LMDB and the real CLI.

Why: no group goes back to an earlier release (docs/operations.md, "Upgrading a
bus"), so a link Hello that leaves out the incarnation group 1's links brought before
is not group 1: an earlier release's process started by mistake on other journals,
or whatever dials in its name. Group 2 took it for an earlier release's dialer,
checked nothing and replaced group 1's live connection with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from clients import Status
from journals import JournalStore
from mrs import protocol as wire
from mrs.group.incarnation import PeerIncarnations
from sim.bus import LinkedBus
from tests.cli_helpers import run_mrs
from tests.process.test_links import QUEUES, wait_for_link

WAIT_S = 30.0
"""How long a wait for another process's answer lasts at most on a loaded machine."""
EARLIER_HELLO = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
"""Group 1's link Hello as a release before the incarnation sent it."""
SAID_NONE = "group 1 said no journals' incarnation, but its links brought one before"


@pytest.fixture
async def bus(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[LinkedBus]:
    """Groups 1 and 2 linked through a fault proxy: each recorded the other's
    journals' incarnation when the link came up."""
    linked = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2)
    await wait_for_link(linked, 2, 1)
    yield linked
    linked.stop()


async def _answer(address: str, hello: wire.Hello) -> object:
    """The first event group 2 answers `hello` with, the connection then closed."""
    host, port = address.rsplit(":", 1)
    connection = wire.Connection("client")
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(connection.send(hello))
        with trio.fail_after(WAIT_S):
            while True:
                data = await stream.receive_some(65536)
                assert data, "group 2 closed the connection without an answer"
                connection.receive_data(data)
                events = [event for event in connection.events() if event is not wire.CLOSED]
                if events:
                    return events[0]


async def _link_from_1(bus: LinkedBus) -> dict:
    async with bus.connect(2, None) as client:
        return (await client.status())["links"]["1"]


async def test_a_dialer_that_leaves_out_the_incarnation_it_brought_before_is_refused(
    bus: LinkedBus,
) -> None:
    """Something dials group 2 as group 1 with a Hello that says no incarnation, as
    an earlier release's would, though group 1's links brought one. Before, group 2
    welcomed it and replaced group 1's connection with it. Now it is refused, saying
    why and what to do, and group 1's link is left alone."""
    before = await _link_from_1(bus)
    answer = await _answer(bus.address(2), EARLIER_HELLO)
    assert isinstance(answer, wire.Fatal), answer  # before: a Welcome
    assert answer.status == Status.LINK_DOWN and SAID_NONE in answer.message, answer
    link = await _link_from_1(bus)
    assert link["state"] == "up", link
    assert link["connections"] == before["connections"], link  # before: one more
    log = (bus.directory / "group2.log").read_text(errors="replace")
    [line] = [line for line in log.splitlines() if f"refused link: {SAID_NONE}" in line]
    assert f"mrs admin reset-link 1 --config {bus.config_path} --group 2" in line, line


async def test_a_group_really_taken_back_to_an_earlier_release_links_after_a_reset(
    bus: LinkedBus,
) -> None:
    """The refusal names `mrs admin reset-link`; run on group 2 while group 1 is down,
    it forgets group 1's incarnation, and a dialer of an earlier release is welcomed
    again, in the shape it reads (no incarnation)."""
    await trio.to_thread.run_sync(bus.processes[1].terminate)
    await wait_for_link(bus, 2, 1, "down")
    refused = await _answer(bus.address(2), EARLIER_HELLO)
    assert isinstance(refused, wire.Fatal) and SAID_NONE in refused.message, refused
    config = str(bus.config_path)
    reset = run_mrs("admin", "reset-link", "1", "--config", config, "--group", "2")
    assert reset.returncode == 0, reset.stderr
    welcome = await _answer(bus.address(2), EARLIER_HELLO)
    assert isinstance(welcome, wire.Welcome), welcome
    assert (welcome.group_id, welcome.incarnation) == (2, b""), welcome


def test_an_empty_incarnation_is_admitted_only_while_none_is_recorded(tmp_path: Path) -> None:
    """The rule both sides apply, on real LMDB journals: a link without an incarnation
    goes on while none is recorded for the peer, records nothing, and is refused once
    one is; a reset lets it through again."""
    store = JournalStore(tmp_path / "journals")
    try:
        peers = PeerIncarnations(store, 2, b"\x02" * 16, "bus.toml")
        assert peers.admit(1, b"") is None
        assert peers.recorded(1) is None  # nothing to record
        assert peers.admit(1, b"\x01" * 16) is None
        refusal = peers.admit(1, b"")
        assert refusal is not None and SAID_NONE in refusal, refusal  # before: None
        assert "reset-link 1 --config bus.toml --group 2" in refusal
        assert peers.admit(1, b"\x01" * 16) is None  # the recorded one still goes on
        peers.reset(1)
        assert peers.admit(1, b"") is None
    finally:
        store.close()
