"""The operator's console that acts (`mrs admin`, `mrs web --admin`) used as an operator
at 3 a.m. uses it on a bus of two real `mrs serve` processes whose groups both have a
queue of one name: the bus page reads a queue as `mrs admin --config` does."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import Status, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs
from tests.process.test_web_bus_admin import WebSession, start_web, stop_web

pytestmark = pytest.mark.xdist_group("admin")


def _bus_file(directory: Path) -> Path:
    """Two linked groups, LDN (1) and NYC (2), each with a queue REPLAY (its 16)."""
    parts = []
    for group_id, name in ((1, "LDN"), (2, "NYC")):
        parts.append(
            f'[[group]]\nid = {group_id}\nname = "{name}"\nlisten = "127.0.0.1:{free_port()}"\n'
            f'data_dir = "g{group_id}"\n[[group.queue]]\nid = 10\nname = "ORDERS{group_id}"\n'
            '[[group.queue]]\nid = 16\nname = "REPLAY"\n'
        )
    path = directory / "bus.toml"
    path.write_text("\n".join(parts) + "\n[[link]]\ngroups = [1, 2]\n")
    return path


@pytest.fixture
def two_groups(tmp_path: Path) -> Iterator[tuple[Path, dict[int, GroupProcess]]]:
    config = _bus_file(tmp_path)
    groups = {group_id: GroupProcess(config, group_id) for group_id in (1, 2)}
    for group in groups.values():
        group.start()
    yield config, groups
    for group in groups.values():
        if group.running:
            group.terminate()


def _admin(config: Path, *argv: str) -> subprocess.CompletedProcess:
    return run_mrs("admin", *argv, "--config", str(config))


def test_the_bus_page_takes_a_group_name_in_the_queue_as_mrs_admin_does(two_groups) -> None:
    """`mrs admin browse REPLAY --config` on a bus where two groups have REPLAY says
    "say which, e.g. LDN.REPLAY", and `LDN.REPLAY` works there. The bus page
    (`mrs web --admin`) answered `NYC.REPLAY` "say which group (groups: 1, 2)" (it took
    only a group number before the dot), so what the CLI tells the operator to type
    did nothing on the page, and a name two groups have was answered without naming
    them. Now the page picks the group a `GROUP.NAME` names, and its refusals say
    which groups, as the command line's do."""
    config, groups = two_groups
    with connect_sync(groups[2].address, "ORDERS2") as client:
        client.put(b"night order", "REPLAY")
    cli = _admin(config, "browse", "NYC.REPLAY", "--json")
    assert cli.returncode == 0 and "night order" in cli.stdout, cli
    ambiguous = _admin(config, "browse", "REPLAY")
    assert ambiguous.returncode == 2 and "LDN.REPLAY" in ambiguous.stderr, ambiguous
    web, url = start_web(config, "--admin")
    try:
        page = WebSession(url)
        by_name = page.act("browse", queue="NYC.REPLAY")
        by_number = page.act("browse", queue="2.REPLAY")
        both = page.act("browse", queue="REPLAY")
        unknown = page.act("browse", queue="TYO.REPLAY")
        moved = page.act("move", queue="NYC.REPLAY", to="ORDERS2")
    finally:
        stop_web(web)
    assert by_name[0] == 200, by_name
    assert by_name[1]["group"] == 2 and by_name[1]["queue"] == "2.16", by_name
    assert [m["preview"] for m in by_name[1]["messages"]] == ["night order"], by_name
    assert by_number[0] == 200 and by_number[1]["group"] == 2, by_number
    assert both[0] == 400, both
    assert "1 (LDN) and 2 (NYC)" in both[1]["error"] and "LDN.REPLAY" in both[1]["error"], both
    assert unknown == (400, {"error": f"no group 'TYO' in {config} (groups: 1, 2)"}), unknown
    assert moved[0] == 200 and moved[1]["moved"] == 1 and moved[1]["to"] == "2.10", moved
    with connect_sync(groups[2].address, "ORDERS2") as client:
        assert client.get(timeout=10).body == b"night order"


def test_a_move_to_another_group_is_refused_with_what_to_do_instead(two_groups) -> None:
    """`mrs admin move ORDERS1 --to 2.10` was refused "2.10 is not a queue of group 1
    (ask its own group's server)": group 2's server cannot take messages out of group
    1, so the advice led nowhere. The line now says a move stays in its group and
    how to send them there; nothing moved, the refusal journaled. A message a
    consumer got and gave back (not confirmed) moves within the group with its
    delivery count, and comes POSSDUPL to the consumer at the target."""
    config, groups = two_groups
    address = groups[1].address
    with connect_sync(address, "ORDERS1") as client:
        client.put(b"first", "ORDERS1")
        client.put(b"second", "ORDERS1")
        assert client.get(timeout=10).body == b"first"  # held, and given back at close
    refused = _admin(config, "move", "ORDERS1", "--to", "2.10")
    assert refused.returncode == 1, refused
    assert "a move stays in its group" in refused.stderr, refused.stderr
    assert "mrs jplay dlj --to QUEUE" in refused.stderr, refused.stderr
    assert "ask its own group" not in refused.stderr, refused.stderr
    journal = _admin(config, "journal", "--group", "1", "--json")
    assert '"NOSUCHQUEUE"' in journal.stdout, journal.stdout
    moved = _admin(config, "move", "ORDERS1", "--to", "LDN.REPLAY")
    assert moved.returncode == 0 and "moved 2 from 1.10 to 1.16" in moved.stdout, moved
    with connect_sync(address, "REPLAY") as consumer:
        first, second = consumer.get(timeout=10), consumer.get(timeout=10)
    assert (first.body, first.delivery_status) == (b"first", Status.POSSDUPL), first
    assert (second.body, second.delivery_status) == (b"second", Status.CONFIRMREQ), second
