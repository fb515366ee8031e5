"""`mrs admin` against real `mrs serve` processes: browse, purge, move, connections,
the admin journal, one-line mistakes, rights under [auth], and a move that resumes
after a SIGKILL of the server or of the `mrs admin` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import (
    DeliveryMode,
    NoSuchQueue,
    NotAuthorized,
    TooManyUnconfirmed,
    Uma,
    connect,
    connect_sync,
)
from mrs.config.bus import load_config
from mrs.ops.admin_actions import JOURNAL_FILE_NAME, MOVED_HEADER
from tests.auth_helpers import SecureBus, add_principal, creds, password_of
from tests.cli_helpers import run_mrs

pytestmark = pytest.mark.xdist_group("admin")


async def _put_all(address: str, target: str, bodies: list[bytes], **options) -> None:
    async with connect(address, "SENDER", **options) as client:
        for body in bodies:
            await client.put(body, target, delivery=DeliveryMode.WF_DQF)


async def _take_all(address: str, queue: str, **options) -> list:
    """Every message waiting on `queue`, got and confirmed, in order."""
    taken = []
    async with connect(address, queue, **options) as client:
        while (await client.pending([queue]))[0]:
            message = await client.get(timeout=5)
            taken.append(message)
            await message.confirm()
    return taken


def _admin(address: str, *argv: str) -> subprocess.CompletedProcess:
    return run_mrs("admin", *argv, "--address", address)


def _journal(data_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (data_dir / JOURNAL_FILE_NAME).read_text().splitlines()]


def test_browse_shows_without_taking_move_keeps_order_purge_goes_to_the_dlj(bus) -> None:
    bodies = [f"order-{i}".encode() for i in range(6)]
    trio.run(_put_all, bus.address, "ORDERS", bodies)

    async def deliver_once_unconfirmed() -> None:  # the first comes back POSSDUPL
        async with connect(bus.address, "ORDERS") as client:
            await client.get(timeout=5)

    trio.run(deliver_once_unconfirmed)
    browsed = _admin(bus.address, "browse", "ORDERS", "--limit", "4", "--json")
    assert browsed.returncode == 0, browsed.stderr
    shown = json.loads(browsed.stdout)
    assert shown["waiting"] == 6
    assert [m["preview"] for m in shown["messages"]] == ["order-0", "order-1", "order-2", "order-3"]
    assert [m["possdupl"] for m in shown["messages"]] == [True, False, False, False]
    assert shown["messages"][0]["deliveries"] == 1
    picked = _admin(bus.address, "browse", "ORDERS", "--contains", "der-4", "--json")
    assert [m["preview"] for m in json.loads(picked.stdout)["messages"]] == ["order-4"]
    none = _admin(bus.address, "browse", "ORDERS", "--class", "7", "--json")
    assert json.loads(none.stdout)["messages"] == [] and json.loads(none.stdout)["waiting"] == 6
    table = _admin(bus.address, "browse", "ORDERS")
    assert table.returncode == 0 and "POSSDUPL" in table.stdout and "order-5" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80

    moved = _admin(bus.address, "move", "ORDERS", "--to", "ANYORDER", "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["moved"] == 6
    taken = trio.run(_take_all, bus.address, "ANYORDER")
    assert [m.body for m in taken] == bodies
    assert taken[0].headers[MOVED_HEADER]["queue"] == "1.10"
    assert (
        taken[0].possible_duplicate and not taken[1].possible_duplicate
    )  # the delivery count moved with it

    trio.run(_put_all, bus.address, "ORDERS", bodies[:3])
    purged = _admin(bus.address, "purge", "ORDERS", "--reason", "bad batch", "--json")
    assert purged.returncode == 0, purged.stderr
    assert json.loads(purged.stdout)["dead_lettered"] == 3
    dump = run_mrs("dump", "--config", str(bus.config_path), "--group", "1", "dlj", "--json")
    assert dump.returncode == 0, dump.stderr
    dead = [json.loads(line) for line in dump.stdout.splitlines()]
    assert len(dead) == 3 and all("bad batch" in json.dumps(record) for record in dead)
    actions = [record["action"] for record in _journal(bus.data_dir)]
    assert actions == ["move", "purge"]  # a look is logged, not journaled
    assert "admin move by (no auth)" in bus.log_text()
    bus.process.terminate()  # the journal is read without its server too
    offline = run_mrs("admin", "journal", "--offline", "--config", str(bus.config_path), "--json")
    assert [r["action"] for r in json.loads(offline.stdout)["records"]] == actions


def test_connections_and_one_line_mistakes(bus) -> None:
    async def attached_and_ask() -> dict:
        async with connect(bus.address, "ORDERS", program="billing") as _:
            listed = _admin(bus.address, "connections", "--json")
            assert listed.returncode == 0, listed.stderr
            return json.loads(listed.stdout)

    rows = trio.run(attached_and_ask)["connections"]
    with connect_sync(bus.address, None, program="automation") as client:  # the sync client
        listed = client.admin("connections")["connections"]
        assert [row["program"] for row in listed if row["self"]] == ["automation"]
        table = _admin(bus.address, "connections")
        assert table.returncode == 0 and "automation" in table.stdout
        assert max(len(line) for line in table.stdout.splitlines()) <= 80
    billing = [row for row in rows if row["program"] == "billing"]
    assert len(billing) == 1 and billing[0]["queue_name"] == "ORDERS"
    assert [row["program"] for row in rows if row["self"]] == ["mrs admin connections"]
    for argv, words in (
        (("browse", "NOPE"), "no queue 'NOPE'"),
        (("move", "ORDERS", "--to", "ORDERS"), "the target is the source"),
        (("move", "ORDERS", "--to", "9.10"), "9.10"),
        (("move", "ORDERS", "--to", "DLQ"), "1.96 has no DQF"),
        (("set-limits", "ORDERS"), "give one of messages_max, unconfirmed_max"),
    ):
        result = _admin(bus.address, *argv)
        assert result.returncode == 1, (argv, result)
        assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result
    assert "Traceback" not in bus.log_text()


def test_each_action_needs_its_right_and_is_journaled_with_its_principal(tmp_path: Path) -> None:
    secure = SecureBus(tmp_path / "secure", group_ids=(1,))
    add_principal(secure.config_path, "operator", ["--manage", "1.1*", "--admin", "status"])
    secure.start()
    try:
        address = secure.address(1)
        trio.run(lambda: _put_all(address, "1.10", [b"a", b"b"], credentials=creds("producer")))

        async def act(name: str) -> dict[str, object]:
            outcomes: dict[str, object] = {}
            async with connect(address, None, credentials=creds(name)) as client:
                for action, args in (
                    ("browse", {"queue": "1.10"}),
                    ("move", {"queue": "1.10", "to": "1.11"}),
                    ("purge", {"queue": "1.11"}),
                    ("connections", {}),
                    ("add_queue", {"id": 30, "name": "NEWQ"}),
                ):
                    try:
                        outcomes[action] = await client.admin(action, **args)
                    except NotAuthorized as refused:
                        outcomes[action] = refused
            return outcomes

        denied = trio.run(act, "consumer")
        assert all(isinstance(outcome, NotAuthorized) for outcome in denied.values()), denied
        assert "browse on 1.10 needs the manage right" in str(denied["browse"])
        # the action as `mrs admin` takes it, not the right ("add-queue: config needs ...")
        assert "consumer: add-queue needs the admin right 'config'" in str(denied["add_queue"])
        assert "consumer: connections needs the admin right 'status'" in str(
            denied["connections"]
        )
        done = trio.run(act, "operator")
        assert done["move"]["moved"] == 2 and done["purge"]["dead_lettered"] == 2
        journal = _journal(tmp_path / "secure" / "g1")
        refused = [(r["principal"], r["action"]) for r in journal if "refused" in r["result"]]
        assert ("consumer", "browse") in refused and ("consumer", "connections") in refused
        by_operator = [r["action"] for r in journal if r["principal"] == "operator"]
        assert by_operator == ["move", "purge", "add-queue"]  # looks done: logged only
        assert "needs the admin right 'config'" in str(done["add_queue"])
        with pytest.raises(NoSuchQueue):
            trio.run(_ask_unknown, address)
        add_principal(secure.config_path, "owner", ["--admin", "config"])
        granted = run_mrs("admin", "grant", "consumer", "--attach", "1.10", "--manage", "1.10",
                          "--address", address, env={"MRS_AUTH_NAME": "owner",
                          "MRS_AUTH_PASSWORD": password_of("owner")})  # fmt: skip
        assert granted.returncode == 0, granted.stderr
        assert trio.run(act, "consumer")["browse"]["queue"] == "1.10"  # at once, no restart
        assert 'manage = ["1.10"]' in (tmp_path / "secure" / "creds.toml").read_text()
    finally:
        secure.stop()


async def _ask_unknown(address: str) -> None:
    async with connect(address, None, credentials=creds("operator")) as client:
        await client.admin("browse", queue="NOPE")


MESSAGES = 3000


@pytest.mark.parametrize("victim", ["server", "admin"])
def test_a_move_killed_in_the_middle_resumes_without_loss_or_duplicate(make_bus, victim) -> None:
    bus = make_bus(group_extra="pcj_default = false")
    bodies = [f"m{i:05d}".encode() for i in range(MESSAGES)]
    trio.run(_put_all_fast, bus.address, bodies)
    mover = subprocess.Popen(
        [sys.executable, "-m", "mrs", "admin", "move", "ORDERS", "--to", "ANYORDER"]
        + ["--address", bus.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    trio.run(_until_some_moved, bus.address)
    if victim == "server":
        bus.kill()
    else:
        mover.kill()
    mover.wait()
    address = bus.process.start() if victim == "server" else bus.address
    counts = trio.run(_pending, address)
    assert sum(counts) == MESSAGES and counts[0] > 0, counts  # stopped part way
    left = json.loads(_admin(address, "browse", "ORDERS", "--limit", "3", "--json").stdout)
    first_left = bodies[counts[1]].decode()  # after a restart read from the cold backlog
    assert [m["preview"] for m in left["messages"]][0] == first_left
    again = run_mrs("admin", "move", "ORDERS", "--to", "ANYORDER", "--address", address)
    assert again.returncode == 0, again.stderr
    taken = trio.run(_take_all, address, "ANYORDER")
    assert [m.body for m in taken] == bodies  # each once, in order


async def _put_all_fast(address: str, bodies: list[bytes]) -> None:
    from clients import PutItem

    async with connect(address, "SENDER") as client:
        results = await client.put_many(
            [PutItem(body, "ORDERS", delivery=DeliveryMode.NN_DQF) for body in bodies]
        )
    assert all(not isinstance(result, Exception) for result in results)


async def _pending(address: str) -> list[int]:
    async with connect(address, None) as client:
        return await client.pending(["ORDERS", "ANYORDER"])


async def _until_some_moved(address: str) -> None:
    """Wait until the move has stored some messages on the target and left some."""
    async with connect(address, None) as client:
        while True:
            source, target = await client.pending(["ORDERS", "ANYORDER"])
            if target > 0:
                assert source > 0, "the move ended before it could be interrupted"
                return
            await trio.sleep(0.005)  # polling the server's counts: no event to await


def test_limits_and_a_new_queue_change_now_and_survive_a_restart(bus) -> None:
    config_before = bus.config_path.read_text()
    bad = _admin(bus.address, "set-limits", "ORDERS", "--messages-max", "0")
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1, bad
    assert "messages_max" in bad.stderr and bus.config_path.read_text() == config_before
    changed = _admin(bus.address, "set-limits", "ORDERS", "--unconfirmed-max", "1")
    assert changed.returncode == 0, changed.stderr
    assert "unconfirmed_max=1 (was " in changed.stdout, changed.stdout  # what it replaced
    assert "messages_max=" in changed.stdout and changed.stdout.count("(was") == 1
    added = _admin(bus.address, "add-queue", "30", "RETRY", "--confirm", "explicit-out-of-order")
    assert added.returncode == 0, added.stderr
    trio.run(_put_all, bus.address, "ORDERS", [b"one", b"two"])
    trio.run(_put_all, bus.address, "RETRY", [b"kept"])

    async def second_get_waits_for_the_first_confirm() -> None:
        async with connect(bus.address, "ORDERS") as client:
            first = await client.get(timeout=5)
            with pytest.raises(TooManyUnconfirmed):  # unconfirmed_max = 1 now
                await client.get(timeout=5)
            await first.confirm()
            assert (await client.get(timeout=5)).body == b"two"

    trio.run(second_get_waits_for_the_first_confirm)
    address = bus.restart(graceful=True)
    reloaded = load_config(bus.config_path).groups[1]
    assert reloaded.queues[10].unconfirmed_max == 1
    assert reloaded.queue_by_name("RETRY").id == 30
    assert [m.body for m in trio.run(_take_all, address, "RETRY")] == [b"kept"]
    after = bus.config_path.read_text().splitlines()
    assert set(config_before.splitlines()) <= set(after)  # every line kept, only added to
    assert "unconfirmed_max = 1" in after and 'name = "RETRY"' in after


def test_memory_queues_and_the_dlq_are_browsed_and_purged_too(bus) -> None:
    async def memory_messages() -> None:
        async with connect(bus.address, "SENDER") as client:
            for i in range(2):
                await client.put(b"mem %d" % i, "ANYORDER", delivery=DeliveryMode.NN_MEM)
            for i in range(3):  # SMALL holds 2: the third goes to the DLQ
                await client.put(
                    b"small %d" % i, "SMALL", delivery=DeliveryMode.NN_MEM, uma=Uma.DLQ
                )

    trio.run(memory_messages)
    shown = json.loads(_admin(bus.address, "browse", "ANYORDER", "--json").stdout)
    assert [(m["preview"], m["journaled"]) for m in shown["messages"]] == [
        ("mem 0", False),
        ("mem 1", False),
    ]
    dead = json.loads(_admin(bus.address, "browse", "DLQ", "--json").stdout)
    assert dead["queue"] == "1.96" and [m["preview"] for m in dead["messages"]] == ["small 2"]
    for queue in ("ANYORDER", "DLQ"):
        purged = json.loads(_admin(bus.address, "purge", queue, "--json").stdout)
        assert purged["dead_lettered"] == 0 and purged["left"] == 0
        assert purged["memory_discarded"] == (2 if queue == "ANYORDER" else 1)
    assert trio.run(_pending_of, bus.address, ["ANYORDER", "DLQ", "SMALL"]) == [0, 0, 2]


async def _pending_of(address: str, queues: list[str]) -> list[int]:
    async with connect(address, None) as client:
        return await client.pending(queues)


def test_a_selective_move_takes_the_matching_ones_in_order_and_leaves_the_rest(bus) -> None:
    async def mixed() -> None:
        async with connect(bus.address, "SENDER") as client:
            for i in range(8):
                kind = 2 if i % 2 else 1
                await client.put(b"m%d" % i, "ORDERS", msg_class=kind, delivery=DeliveryMode.WF_DQF)

    trio.run(mixed)
    moved = _admin(bus.address, "move", "ORDERS", "--to", "ANYORDER", "--class", "2", "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["moved"] == 4
    assert [m.body for m in trio.run(_take_all, bus.address, "ANYORDER")] == [
        b"m1",
        b"m3",
        b"m5",
        b"m7",
    ]
    assert [m.body for m in trio.run(_take_all, bus.address, "ORDERS")] == [
        b"m0",
        b"m2",
        b"m4",
        b"m6",
    ]


def test_moved_and_purged_messages_keep_their_priority_bookkeeping_across_a_kill(bus) -> None:
    """A message moved to another queue keeps its priority there after a SIGKILL and
    restart (the group keeps a message's priority beside its DQF record: a move
    carries it to the new record, a purge takes it away with the old one)."""

    async def put_prioritised() -> None:
        async with connect(bus.address, "SENDER") as client:
            for body, priority in ((b"low-1", 0), (b"high", 7), (b"low-2", 0)):
                await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF, priority=priority)

    trio.run(_put_all, bus.address, "ANYORDER", [b"already"])  # an older seq, priority 0
    trio.run(put_prioritised)
    moved = _admin(bus.address, "move", "ORDERS", "--to", "ANYORDER", "--json")
    assert moved.returncode == 0 and json.loads(moved.stdout)["moved"] == 3, moved.stderr
    trio.run(put_prioritised)
    purged = _admin(bus.address, "purge", "ORDERS", "--discard", "--json")
    assert purged.returncode == 0, purged.stderr
    address = bus.restart()  # SIGKILL: what the journals hold is all there is
    taken = trio.run(_take_all, address, "ANYORDER")
    assert [(m.body, m.priority) for m in taken] == [
        (b"high", 7),
        (b"already", 0),
        (b"low-1", 0),
        (b"low-2", 0),
    ]
    assert trio.run(_take_all, address, "ORDERS") == []


def test_a_purge_the_dlj_refuses_keeps_the_queues_memory_messages(make_bus) -> None:
    """A purge refused part way (the DLJ full: DLJ_FAILED) put back the journaled
    messages only: the queue's memory messages were gone although nothing was purged."""
    bus = make_bus(limits="dlj_messages_max = 2")

    async def fill() -> None:
        async with connect(bus.address, "SENDER") as client:
            for i in range(3):
                await client.put(b"kept %d" % i, "ANYORDER", delivery=DeliveryMode.WF_DQF)
            for i in range(2):
                await client.put(b"mem %d" % i, "ANYORDER", delivery=DeliveryMode.NN_MEM)

    trio.run(fill)
    refused = _admin(bus.address, "purge", "ANYORDER")
    assert refused.returncode != 0 and "DLJ" in refused.stderr, refused.stderr
    assert trio.run(_pending_of, bus.address, ["ANYORDER"]) == [5]


def test_a_browse_too_big_for_one_frame_is_cut_short_and_says_so(bus) -> None:
    """Messages with ~30 KiB of headers: a browse of 40 made an answer past the
    frame limit, the group closed the operator's connection and logged an ERROR."""

    async def fill() -> None:
        async with connect(bus.address, "SENDER") as client:
            for i in range(40):
                await client.put(b"big %d" % i, "ANYORDER", delivery=DeliveryMode.WF_DQF,
                                 headers={"note": "x" * 30_000})  # fmt: skip

    trio.run(fill)
    shown = _admin(bus.address, "browse", "ANYORDER", "--limit", "40", "--json")
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert answer["truncated"] is True and 0 < len(answer["messages"]) < 40
    assert [m["preview"] for m in answer["messages"]][:2] == ["big 0", "big 1"]
