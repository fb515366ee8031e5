"""`Client.set_pcj` (MessageQ's MRS_SET_PCJ) against a real `mrs serve`: the default
journaling action changes at once and survives a restart (kill -9); a roll closes
the current PCJ segment and opens the next, and under a concurrent put/get/confirm
load no record is lost and none lands in a segment after it was closed."""

from __future__ import annotations

import json

import pytest
import trio

from clients import (
    BadParameter,
    ForceJrn,
    MrsError,
    PcjState,
    PutItem,
    Status,
    connect_sync,
    open_journal,
)
from journals import Journal
from tests.cli_helpers import run_mrs


def _pcj(bus, **selection) -> list[tuple[int, int]]:
    """(seq, segment) of every PCJ record, read from the group's files."""
    with open_journal(bus.data_dir, "pcj", **selection) as journal:
        return [(record.seq, record.segment) for record in journal]


async def _put_get_confirm(client, force_j: ForceJrn = ForceJrn.DEFAULT_JRN) -> int:
    psb = await client.put(b"audited?", "1.10")
    assert psb.status == Status.SUCCESS
    message = await client.get(timeout=10)
    await client.confirm(message.seq, force_j=force_j)
    return message.seq


async def test_the_default_changes_at_once_and_survives_a_restart(make_bus) -> None:
    bus = make_bus()  # pcj_default = false in the config
    async with bus.connect("ORDERS") as client:
        unjournaled = await _put_get_confirm(client)
        assert await client.set_pcj(default=True) == PcjState(True, 0, 0, None)
        journaled = await _put_get_confirm(client)
    assert _pcj(bus) == [(journaled, 0)]
    bus.restart()  # SIGKILL: the answer came once the setting was durable
    async with bus.connect("ORDERS") as client:
        after_restart = await _put_get_confirm(client)
        assert (await client.set_pcj()).default is True  # None: unchanged, only asked
        rolled = await client.set_pcj(default=ForceJrn.NO_JRN, roll=True)
        assert (rolled.default, rolled.segment, rolled.closed_segment) == (False, 1, 0)
        assert rolled.opened_ns > 0
        await _put_get_confirm(client)  # DEFAULT_JRN: now not journaled
        forced = await _put_get_confirm(client, ForceJrn.FORCE_JRN)
        assert (await client.status())["pcj"] == {
            "default": False,
            "segment": 1,
            "opened_ns": rolled.opened_ns,
        }
    assert unjournaled not in dict(_pcj(bus))
    assert _pcj(bus) == [(journaled, 0), (after_restart, 0), (forced, 1)]
    assert _pcj(bus, segment=1) == [(forced, 1)]
    # the tools read every segment: mrs dump, and mrs jplay's selection (a dry run)
    config = ("--config", str(bus.config_path), "--group", "1")
    dumped = run_mrs("dump", *config, "pcj", "--json")
    assert [json.loads(line)["seq"] for line in dumped.stdout.splitlines()] == [
        journaled,
        after_restart,
        forced,
    ]
    replayed = run_mrs("jplay", *config, "pcj", "--dry-run", "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["would_send"] == 3
    bus.restart(graceful=True)

    def blocking() -> PcjState:  # the blocking client: the same call
        with connect_sync(bus.address, None) as client:
            return client.set_pcj()

    assert await trio.to_thread.run_sync(blocking) == PcjState(False, 1, rolled.opened_ns, None)


async def test_a_roll_under_load_loses_no_record(make_bus) -> None:
    """Four consumers confirm 800 messages into the PCJ while three rolls happen. Right
    after each roll is answered, the closed segment is read: it never grows later,
    and the segments together hold every confirmed message once."""
    bus = make_bus(group_extra="pcj_default = true")
    count, consumers = 800, 4
    confirmed: list[int] = []
    closed_then: dict[int, list[tuple[int, int]]] = {}
    progress = trio.Condition()

    async def produce(client) -> None:
        for start in range(0, count, 50):
            items = [PutItem(b"m%d" % i, "1.11") for i in range(start, start + 50)]
            assert all(psb.status == Status.SUCCESS for psb in await client.put_many(items))

    async def consume(client) -> None:
        while len(confirmed) < count:
            try:
                message = await client.get(timeout=1)
            except MrsError as error:  # the last ones went to the other consumers
                if error.status == Status.TIMEOUT:
                    continue
                raise
            await client.confirm(message.seq)
            confirmed.append(message.seq)
            async with progress:
                progress.notify_all()

    async def roll(control) -> None:
        for threshold in (count // 4, count // 2, 3 * count // 4):
            async with progress:
                while len(confirmed) < threshold:
                    await progress.wait()
            state = await control.set_pcj(roll=True)
            closed_then[state.closed_segment] = _pcj(bus, segment=state.closed_segment)

    async with (
        bus.connect("SENDER") as producer,
        bus.connect("ANYORDER") as consumer,
        bus.connect() as control,
    ):
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce, producer)
                for _ in range(consumers):
                    nursery.start_soon(consume, consumer)
                nursery.start_soon(roll, control)
    records = _pcj(bus)
    assert len(confirmed) == count
    assert sorted(seq for seq, _ in records) == sorted(confirmed)  # all, once each
    assert {segment for _, segment in records} == {0, 1, 2, 3}
    for segment, then in closed_then.items():
        assert then and _pcj(bus, segment=segment) == then  # closed: never written again


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"default": "yes"}, "default is True, False, None"),
        ({"default": 7}, "default is True, False, None"),
        ({"roll": 1}, "roll is True"),
    ],
)
async def test_bad_arguments_are_refused_with_one_line(bus, arguments, words) -> None:
    async with bus.connect() as client:
        with pytest.raises(BadParameter) as refused:
            await client.set_pcj(**arguments)
    assert refused.value.status == Status.BADPARAM
    assert words in refused.value.message and "\n" not in refused.value.message


async def test_a_change_the_journal_refuses_is_not_made(make_mem_bus) -> None:
    """MRS_SET_PCJ answered JOURNAL_FAIL changed nothing: the default and the segment
    stay as they were (they stayed changed in memory, and a restart undid them)."""
    bus = await make_mem_bus()  # pcj_default = false
    async with bus.connect("ORDERS") as client:
        bus.fail_commits("EIO")
        with pytest.raises(MrsError) as failed:
            await client.set_pcj(default=True, roll=True)
        assert failed.value.status == Status.JOURNAL_FAIL
        bus.fail_commits(None)
        assert (await client.status())["pcj"] == {"default": False, "segment": 0, "opened_ns": 0}
        await _put_get_confirm(client)  # the default is still false: no PCJ record
        assert bus.store.count(Journal.PCJ) == 0
