"""Probes of the client SAF journal as an application developer who must not lose a
message while the group is unreachable, with a real `mrs serve` and real LMDB files:
a journaled put is answered STORED, so every put the group would refuse whatever its
configuration must be refused at once, never acknowledged and dropped at drain time;
and a full journal says which option to raise, not LMDB's words."""

from __future__ import annotations

import pytest
import trio

from clients import (
    BadParameter,
    DeliveryMode,
    ForceJrn,
    JournalFull,
    NoSuchQueue,
    NotAttached,
    Status,
    Uma,
    connect,
    open_journal,
    saf_drain,
)
from mrs.config import schema
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer, take_all

BAD_ADDRESSES = ["1.0", "0.10", "1.1000", "a.b.c", "1.-3", "1.10.1"]
"""Targets no group accepts, whatever its bus file says (syntax, id ranges)."""


@pytest.fixture
def server(tmp_path):
    """Configured, not started: the tests start it when they want it up."""
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


async def test_a_journaled_put_from_no_queue_is_refused_at_once(server, tmp_path) -> None:
    """A client connected with no queue (`connect(address, None)`) puts nothing: the
    group answers NOTATTACHED. With a journal and the group down, its recoverable
    puts were answered JOURNAL_ON/STORED, then refused NOTATTACHED when they drained
    and removed with a WARNING: acknowledged, then lost. Now refused at once."""
    async with connect(
        server.address, None, saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        assert client.journal_status == Status.JOURNAL_ON
        with pytest.raises(NotAttached) as refused:
            await client.put(b"lost", target="1.10", delivery=DeliveryMode.WF_DQF)
        assert refused.value.message == "attach to a queue first"
        assert client.journal_backlog == 0


async def _put_each_bad(client, **fixed) -> dict[str, str]:
    """The one line each bad address is refused with (NoSuchQueue), by address."""
    words = {}
    for address in BAD_ADDRESSES:
        put = (
            {"target": address, **fixed} if "target" not in fixed else {"resp_q": address, **fixed}
        )
        with pytest.raises(NoSuchQueue) as refused:
            await client.put(b"bad", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ, **put)
        # the group's words lose their closing quote (mrs.group.context strips quotes)
        words[address] = refused.value.message.rstrip("'")
    return words


async def test_an_address_no_group_accepts_is_refused_not_journaled(server, tmp_path) -> None:
    """Targets and response queues that are no address (`a.b.c`) or name an id out
    of range (`1.0`, `1.1000`) were journaled STORED while the group was down, and the
    drain then dropped each (refused NOSUCHQUEUE: a `rejected` event and a WARNING):
    a typo lost acknowledged messages that a connected put would have had refused at
    once. Now they are refused at once in the group's own words, and names (resolved
    by the group at drain time) and numbers are journaled and drained as before."""
    events: list = []
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(events.append)
        journaled_target = await _put_each_bad(client)
        journaled_resp_q = await _put_each_bad(client, target="1.11")
        assert client.journal_backlog == 0
        good = ["1.11", "ANYORDER", "NYC.ANYORDER", " 1.11 "]
        for index, target in enumerate(good):
            psb = await client.put(b"m%d" % index, target=target, delivery=DeliveryMode.WF_DQF)
            assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)
        server.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
        assert await _put_each_bad(client) == journaled_target  # the group's words
        assert await _put_each_bad(client, target="1.11") == journaled_resp_q
    assert [event for event in events if event.kind == "rejected"] == []
    async with connect(server.address, "ANYORDER") as receiver:
        bodies = [message.body for message in await take_all(receiver)]
    assert bodies == [b"m0", b"m1", b"m2", b"m3"]


async def test_a_full_journal_names_the_option_to_raise(server, tmp_path) -> None:
    """A journal at its byte cap raised JournalFull with LMDB's words ("Please use a
    larger Environment(map_size=) parameter"), an option no application has; the
    count cap named `messages_max`, not `saf_messages_max`. Now each names the
    journal and the `connect` option that caps it."""
    async with connect(
        server.address,
        "SENDER",
        saf_journal=tmp_path / "bytes",
        saf_bytes_max=1 << 20,
        reconnect=FAST,
        connect_timeout_s=2,
    ) as client:
        with pytest.raises(JournalFull) as full:  # noqa: PT012 - puts until the cap
            for _ in range(1000):
                await client.put(b"x" * 16384, target="1.10", delivery=DeliveryMode.WF_DQF)
        message = full.value.message
        assert "saf_bytes_max=1048576" in message and str(tmp_path / "bytes") in message
        assert "map_size" not in message
    async with connect(
        server.address,
        "SENDER",
        saf_journal=tmp_path / "count",
        saf_messages_max=1,
        reconnect=FAST,
        connect_timeout_s=2,
    ) as client:
        await client.put(b"one", target="1.10", delivery=DeliveryMode.WF_DQF)
        with pytest.raises(JournalFull) as full:
            await client.put(b"two", target="1.10", delivery=DeliveryMode.WF_DQF)
        assert "saf_messages_max=1" in full.value.message


def test_the_address_rule_is_the_bus_files() -> None:
    """The client's rule for what no group accepts (clients.saf_drain) copies the bus
    file's ids and names (mrs.config.schema, not imported by `clients`): a change there
    must reach it, or the client refuses a put the group would store."""
    assert saf_drain.GROUP_IDS == (schema.GROUP_ID_MIN, schema.GROUP_ID_MAX)
    assert saf_drain.QUEUE_IDS == (schema.QUEUE_ID_MIN, schema.QUEUE_ID_MAX)
    assert saf_drain.NAME_PATTERN.pattern == schema._NAME_PATTERN.pattern


async def test_a_remote_reader_iterated_again_reads_what_was_written_since(bus) -> None:
    """`clients.open_journal` iterated again after its end reads the records written
    since; `q.open_journal` promises the same reader through the group, but once at
    its end it read nothing more, however many confirms followed: an application
    following the PCJ from another host saw none of them. Now both read them."""

    async def confirm_one(client, body: bytes) -> None:
        await client.put(body, target="1.11", delivery=DeliveryMode.WF_DQF)
        message = await client.get(timeout=10)
        await client.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)

    async with bus.connect("ANYORDER") as client:
        await confirm_one(client, b"first")
        with open_journal(bus.data_dir, "pcj") as local:
            async with client.open_journal("pcj", page_records=1) as remote:
                assert [r.body for r in local] == [r.body async for r in remote] == [b"first"]
                await confirm_one(client, b"second")
                await confirm_one(client, b"third")
                assert [r.body async for r in remote] == [b"second", b"third"]
                assert [r.body for r in local] == [b"second", b"third"]
                assert [r.body async for r in remote] == []  # nothing new: the end again
        async with client.open_journal("pcj", limit=1) as limited:
            assert [r.body async for r in limited] == [b"first"]
            await confirm_one(client, b"fourth")
            assert [r.body async for r in limited] == []  # its limit holds


async def test_a_wait_for_a_journal_status_that_cannot_come_is_refused(server, tmp_path) -> None:
    """`wait_journal_status` on a client without a journal (its status stays None),
    or for a value that is no journal status (SUCCESS, the text "LINK_UP"), waited
    for ever. Now each is refused at once, one line."""
    server.start()
    async with connect(server.address, "SENDER") as client:
        with pytest.raises(BadParameter) as refused, trio.fail_after(5):  # not for ever
            await client.wait_journal_status(Status.LINK_UP)
        assert "this client has no SAF journal" in refused.value.message
    async with connect(server.address, "SENDER", saf_journal=tmp_path / "j") as client:
        for wrong in (Status.SUCCESS, "LINK_UP", None):
            with pytest.raises(BadParameter) as refused, trio.fail_after(5):
                await client.wait_journal_status(wrong)  # type: ignore[arg-type]
            assert "status is one of JOURNAL_ON, LINK_UP, JOURNAL_FAIL" in refused.value.message
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)  # the journal's own: waited for
