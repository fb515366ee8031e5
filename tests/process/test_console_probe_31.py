"""The operator's console that acts (`mrs admin`, the group's web page) used as an
operator at 3 a.m. uses it, on real `mrs serve` processes: a page's request of no
action's shape, and a purge on a journal with no room left for the DLJ's copies."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import PutItem, Status, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import one_line, run_mrs
from tests.process.test_web_bus_admin import WebSession, _web_endpoint

pytestmark = pytest.mark.xdist_group("admin")

BODY_BYTES = 4000
"""A body of about a page: LMDB keeps each such record in pages of its own."""


def _bus_file(directory: Path, extra: str = "") -> Path:
    """One group with ORDERS, REPLAY and OUT (its producer's own queue)."""
    path = directory / "bus.toml"
    path.write_text(
        f'[[group]]\nid = 1\nname = "LDN"\nlisten = "127.0.0.1:{free_port()}"\n'
        f'data_dir = "g1"\n{extra}'
        '[[group.queue]]\nid = 10\nname = "ORDERS"\n'
        '[[group.queue]]\nid = 11\nname = "OUT"\n'
        '[[group.queue]]\nid = 16\nname = "REPLAY"\n'
    )
    return path


@pytest.fixture
def web_group(tmp_path: Path) -> Iterator[tuple[Path, GroupProcess]]:
    config = _bus_file(tmp_path, '[group.ops]\nweb_listen = "127.0.0.1:0"\nweb_admin = true\n')
    group = GroupProcess(config, 1)
    group.start()
    yield config, group
    group.terminate()


def test_a_page_request_whose_action_is_no_name_is_refused_in_one_line(web_group) -> None:
    """A POST to the group page's /api/admin/act whose `action` was a list or an object
    (`{"action": ["purge"], ...}`: a script's mistake, a tampered form) was answered
    500 "internal error (see the group's log)" with a TypeError traceback there (the
    set of actions cannot hold a list). Now it is a 400 naming what was posted, the
    group's log has no traceback, and nothing was purged."""
    config, group = web_group
    with connect_sync(group.address, "OUT") as client:
        client.put(b"night order", "ORDERS")
    page = WebSession(_web_endpoint(group.address))
    answers = [
        page.post("api/admin/act", {"action": action, "args": {"queue": "ORDERS"}})
        for action in (["purge"], {"purge": True})
    ]
    assert answers == [
        (400, {"error": "unknown action ['purge']"}),
        (400, {"error": "unknown action {'purge': True}"}),
    ], answers
    browsed = page.act("browse", queue="ORDERS")
    assert browsed[0] == 200 and browsed[1]["waiting"] == 1, browsed
    assert "Traceback" not in (config.parent / "group1.log").read_text()


def _fill(address: str) -> int:
    """Recoverable puts to ORDERS until the journal's reserve refuses one: how many
    were stored."""
    stored = 0
    with connect_sync(address, "OUT") as client:
        while True:
            psbs = client.put_many([PutItem(b"x" * BODY_BYTES, "ORDERS") for _ in range(16)])
            kept = [psb for psb in psbs if psb.delivery_status != Status.MRS_RES_EXH]
            stored += len(kept)
            if len(kept) < len(psbs):
                return stored


def _depths(config: Path) -> dict[str, int]:
    status = run_mrs("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    queues = json.loads(status.stdout)["groups"][0]["status"]["queues"]
    return {name: queue["pending"] for name, queue in queues.items()}


def test_a_purge_without_room_for_its_dlj_copies_says_nothing_was_purged(tmp_path) -> None:
    """A journal filled up to its reserve, its messages moved to another queue (the
    freed pages are not yet where the next records go): `mrs admin purge REPLAY`
    (journaled messages to the DLJ: a copy each before their DQF records go) finds the
    map full. The operator read LMDB's words, "purge: journal map full: mdb_put:
    MDB_MAP_FULL: Environment mapsize limit reached (Please use a larger
    Environment(map_size=) parameter)", which said neither that every message still
    waits nor what to do. Now one line says the journal is full, nothing was purged,
    and that --discard needs no copies; the queue is as it was, and the discard works."""
    config = _bus_file(tmp_path, "[group.limits]\njournal_bytes_max = 2097152\n")
    group = GroupProcess(config, 1)
    group.start()
    try:
        stored = _fill(group.address)
        moved = run_mrs("admin", "move", "ORDERS", "--to", "REPLAY", "--config", str(config))
        assert moved.returncode == 0 and f"moved {stored} " in moved.stdout, moved
        purged = run_mrs("admin", "purge", "REPLAY", "--config", str(config))
        if purged.returncode == 0:
            # The map found room for the copies (it grows past its cap while the records
            # hold no more than it: mrs.storage.journal_usage): all of them moved, whole.
            assert f"{stored} to the DLJ" in purged.stdout and "0 left" in purged.stdout
            return
        line = one_line(purged, 1, "the journal is full", "nothing was purged", "--discard")
        assert "MDB_MAP_FULL" not in line and "map_size" not in line, line
        assert _depths(config)["1.16"] == stored
        discarded = run_mrs("admin", "purge", "REPLAY", "--discard", "--config", str(config))
        assert discarded.returncode == 0, discarded
        assert f"{stored} discarded" in discarded.stdout and "0 left" in discarded.stdout
    finally:
        group.terminate()
