"""What `mrs status` says of a replicated group none of whose instances answers, from
what etcd holds (stood in for: `_etcd_state`), in process. Asked by one instance's
address it said "a failover is under way" alone while the group waited for its only
in-sync instance to be started again; with a leader named it did not say that the
leader may be lost with its lease not yet run out."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from mrs.config.schema import CoordinatorConfig
from mrs.replication.coordinator import GroupState
from mrs.tools import bus_status
from mrs.tools.group_view import GroupView
from sim.ports import free_port

COORDINATOR = CoordinatorConfig(etcd=("http://127.0.0.1:1",))


def _etcd_holds(monkeypatch: pytest.MonkeyPatch, state: GroupState) -> None:
    async def holds(coordinator, group_id: int, timeout_s: float) -> GroupState:
        return state

    monkeypatch.setattr(bus_status, "_etcd_state", holds)


def test_an_instance_asked_alone_names_the_in_sync_instances_to_start(monkeypatch) -> None:
    _etcd_holds(monkeypatch, GroupState(leader=None, term=7, in_sync=("b",)))
    view = GroupView(
        address="127.0.0.1:7101",
        group=1,
        name="NYC",
        error="connection refused",
        instance="a",
        replication_address=f"127.0.0.1:{free_port()}",  # nothing listens: not running
    )
    line = trio.run(bus_status.not_active_line, view, COORDINATOR, 1, 1.0)
    assert "etcd names no active instance (term 7, in sync: b)" in line
    assert "or the in-sync instances are down (start them" in line


def test_a_named_leader_that_does_not_answer_may_be_lost_with_its_lease(monkeypatch) -> None:
    _etcd_holds(monkeypatch, GroupState(leader="c", term=3, in_sync=("a", "c")))
    note = trio.run(bus_status.leadership_note, COORDINATOR, 1, 1.0, Path("bus.toml"))
    assert note.startswith("etcd names c active in term 3: it is starting")
    assert "or it was lost and its lease (lease_ttl_s) has not run out yet" in note
