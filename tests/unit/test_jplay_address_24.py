"""Where `mrs jplay` sends a replay when it is given the bus file and no --address."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.config.bus import parse_config
from mrs.offline.journal_files import GroupJournals
from mrs.tools.journal.jplay import _server_address
from mrs.tools.journal.replay import UsageError
from tests.unit.test_replication_config import bus, instance


def journals_of(text: str, tmp_path: Path) -> GroupJournals:
    config = parse_config(text, tmp_path / "bus.toml")
    group = config.group(1)
    return GroupJournals(1, tmp_path, tmp_path / "journals", config, group)


def no_address() -> object:
    return type("Args", (), {"address": None})()


def test_a_replicated_group_whose_own_listen_is_port_0_is_reached_at_its_instances(
    tmp_path: Path,
) -> None:
    """The group's own `listen` port 0 says nothing of where its instances listen: the
    replay goes to them (it was refused "give --address", as `mrs status` once was)."""
    text = bus(instance("a", 7001) + instance("b", 7002) + instance("c", 7003))
    text = text.replace('name = "NYC"\n', 'name = "NYC"\nlisten = "127.0.0.1:0"\n', 1)
    where = journals_of(text, tmp_path)
    assert where.group is not None and where.group.instances  # its own listen is not used
    address = _server_address(no_address(), where)  # type: ignore[arg-type]
    assert address == "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"


def test_a_single_group_on_port_0_still_asks_for_the_address(tmp_path: Path) -> None:
    text = '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
    with pytest.raises(UsageError, match="give --address HOST:PORT"):
        _server_address(no_address(), journals_of(text, tmp_path))  # type: ignore[arg-type]
