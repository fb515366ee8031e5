"""`mrs admin` as an operator at 3 a.m. uses it on one real group: text in a message,
a program name or a reason that looks like rich markup, an admin journal file with
a line cut short, a move of a queue holding memory and journaled messages, and the
trail a purge and a selective move leave."""

from __future__ import annotations

import json
import subprocess

import pytest
import trio

from clients import DeliveryMode, connect
from mrs.ops.admin_actions import JOURNAL_FILE_NAME
from tests.cli_helpers import run_mrs

pytestmark = pytest.mark.xdist_group("admin")

MARKUP_LOOKALIKES = ["[/bold] closing", "[red]red[/red]", "[link=x]y"]


def _admin(address: str, *argv: str) -> subprocess.CompletedProcess:
    return run_mrs("admin", *argv, "--address", address)


async def _put(address: str, target: str, items: list[tuple[bytes, DeliveryMode]]) -> None:
    async with connect(address, "SENDER") as client:
        for body, delivery in items:
            await client.put(body, target, delivery=delivery)


def test_bracketed_text_is_shown_as_sent_in_every_table(bus) -> None:
    """A body, a program name or a reason such as "[/bold] closing" stopped the table
    (rich read it as markup: "closing tag ... doesn't match", exit 1), and "[red]"
    was taken as a style, its brackets not shown."""
    bodies = [(text.encode(), DeliveryMode.WF_DQF) for text in MARKUP_LOOKALIKES]
    trio.run(_put, bus.address, "ANYORDER", bodies)
    browsed = _admin(bus.address, "browse", "ANYORDER")
    assert browsed.returncode == 0, browsed.stderr
    for text in MARKUP_LOOKALIKES:
        assert text in browsed.stdout, browsed.stdout

    async def listed_while_attached() -> subprocess.CompletedProcess:
        async with connect(bus.address, "ORDERS", program="[/x] billing"):
            return await trio.to_thread.run_sync(_admin, bus.address, "connections")

    listed = trio.run(listed_while_attached)
    assert listed.returncode == 0 and "[/x] billing" in listed.stdout, listed
    purged = _admin(bus.address, "purge", "ANYORDER", "--reason", "[/why] bad feed")
    assert purged.returncode == 0, purged.stderr
    journal = _admin(bus.address, "journal", "--limit", "1")
    assert journal.returncode == 0, journal.stderr
    assert "[/why]" in journal.stdout, journal.stdout


def test_the_offline_journal_reads_past_a_line_cut_short(bus) -> None:
    """A line of admin-journal.jsonl cut short (a crash, a full disk) stopped
    `mrs admin journal --offline` with "unexpected error: JSONDecodeError", and the
    group's next line was appended to it and lost with it."""
    first = _admin(bus.address, "browse", "ORDERS")
    assert first.returncode == 0, first.stderr
    path = bus.data_dir / JOURNAL_FILE_NAME
    with open(path, "a", encoding="utf-8") as file:
        file.write('{"time_ns": 1, "action": "pur')  # what a crash mid-write leaves
    after = _admin(bus.address, "purge", "ORDERS", "--reason", "after the tear")
    assert after.returncode == 0, after.stderr
    last = json.loads(path.read_text().splitlines()[-1])  # a whole line of its own
    assert last["action"] == "purge" and last["args"]["reason"] == "after the tear"
    bus.process.terminate()
    config = str(bus.config_path)
    offline = run_mrs("admin", "journal", "--offline", "--config", config, "--json")
    assert offline.returncode == 0, offline.stderr
    answer = json.loads(offline.stdout)
    assert [record["action"] for record in answer["records"]] == ["purge"]
    assert answer["unreadable_lines"] == 1
    assert len(offline.stderr.strip().splitlines()) == 1 and "not JSON" in offline.stderr
    table = run_mrs("admin", "journal", "--offline", "--config", config)
    assert table.returncode == 0 and "purge" in table.stdout, table
    for limit in ("0", "-2"):  # lines[-0:] was every line
        refused = run_mrs("admin", "journal", "--offline", "--config", config, "--limit", limit)
        assert refused.returncode == 2 and "--limit" in refused.stderr, refused


def test_a_move_keeps_the_order_of_memory_and_journaled_messages(bus) -> None:
    """Memory messages waited on the target at once and journaled ones at their
    commit, so a queue holding both came out memory ones first (m1 m3 m5 m0 m2 m4)."""
    items = [
        (b"m%d" % i, DeliveryMode.WF_DQF if i % 2 == 0 else DeliveryMode.NN_MEM) for i in range(6)
    ]
    trio.run(_put, bus.address, "ORDERS", items)
    moved = _admin(bus.address, "move", "ORDERS", "--to", "ANYORDER", "--json")
    assert moved.returncode == 0 and json.loads(moved.stdout)["moved"] == 6, moved

    async def take_all() -> list[bytes]:
        bodies = []
        async with connect(bus.address, "ANYORDER") as client:
            while (await client.pending(["ANYORDER"]))[0]:
                message = await client.get(timeout=5)
                bodies.append(message.body)
                if message.needs_confirm:
                    await message.confirm()
        return bodies

    assert trio.run(take_all) == [body for body, _ in items]


def test_a_purge_of_a_queue_being_consumed_and_a_selective_move_leave_their_trail(
    bus,
) -> None:
    """The message a consumer holds stays with it and reaches the PCJ when confirmed;
    the others go to the DLJ; the admin journal has the purge's reason and the
    move's selection (before: only the queue, as if the whole queue had moved)."""
    trio.run(_put, bus.address, "ORDERS", [(b"p%d" % i, DeliveryMode.WF_DQF) for i in range(3)])

    async def purge_while_held() -> dict:
        async with connect(bus.address, "ORDERS") as consumer:
            held = await consumer.get(timeout=5)
            purged = await trio.to_thread.run_sync(
                _admin, bus.address, "purge", "ORDERS", "--reason", "night run", "--json"
            )
            assert purged.returncode == 0, purged.stderr
            await held.confirm()
            return json.loads(purged.stdout)

    assert trio.run(purge_while_held)["dead_lettered"] == 2
    config = str(bus.config_path)
    dlj = run_mrs("dump", "--config", config, "--group", "1", "dlj", "--json")
    pcj = run_mrs("dump", "--config", config, "--group", "1", "pcj", "--json")
    dead = [json.loads(line) for line in dlj.stdout.splitlines()]
    confirmed = [json.loads(line) for line in pcj.stdout.splitlines()]
    assert len(dead) == 2 and all("night run" in json.dumps(record) for record in dead)
    assert len(confirmed) == 1 and confirmed[0]["seq"] not in {r["seq"] for r in dead}

    async def mixed_classes() -> None:
        async with connect(bus.address, "SENDER") as client:
            for i in range(4):
                await client.put(b"c%d" % i, "ORDERS", msg_class=1 + i % 2)

    trio.run(mixed_classes)
    moved = _admin(bus.address, "move", "ORDERS", "--to", "ANYORDER", "--class", "2")
    assert moved.returncode == 0, moved.stderr
    lines = [
        json.loads(line) for line in (bus.data_dir / JOURNAL_FILE_NAME).read_text().splitlines()
    ]
    purge_line = next(line for line in lines if line["action"] == "purge")
    move_line = next(line for line in lines if line["action"] == "move")
    assert purge_line["args"]["reason"] == "night run"
    assert move_line["args"]["select"] == {"class": 2} and move_line["result"]["moved"] == 2
