"""mrs.config.rewrite: a run-time change lands in the right table, the rest of the
file (comments, order) stays, and the result is what the parser reads."""

from __future__ import annotations

import stat

import pytest

from mrs.config.bus import parse_config
from mrs.config.rewrite import with_new_queue, with_queue_values, write_atomically

BUS = """\
# the bus
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:7001"
data_dir = "g1"
[[group.queue]]
id = 10
name = "ORDERS"   # the orders
messages_max = 100
[[group.queue]]
id = 11
name = "OTHER"
[group.guards]
parked_gets_max = 100

[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:7002"
data_dir = "g2"
[[group.queue]]
id = 10
name = "ORDERS"

[[link]]
groups = [1, 2]
"""


def test_a_limit_is_replaced_or_added_in_its_own_queue_only() -> None:
    text = with_queue_values(BUS, 1, 10, {"messages_max": 7, "unconfirmed_max": 3})
    bus = parse_config(text, "bus.toml")
    orders = bus.groups[1].queues[10]
    assert (orders.messages_max, orders.unconfirmed_max) == (7, 3)
    assert bus.groups[2].queues[10] == parse_config(BUS, "bus.toml").groups[2].queues[10]
    assert "# the bus" in text and 'name = "ORDERS"   # the orders' in text
    assert text.count("\n") == BUS.count("\n") + 1  # one line replaced, one added


def test_a_new_queue_goes_to_the_end_of_its_group() -> None:
    text = with_new_queue(BUS, 1, {"id": 30, "name": "RETRY", "recoverable": False})
    bus = parse_config(text, "bus.toml")
    assert bus.groups[1].queues[30].name == "RETRY" and not bus.groups[1].queues[30].recoverable
    assert 30 not in bus.groups[2].queues
    assert text.index('name = "RETRY"') < text.index('name = "LDN"')
    assert bus.groups[1].guards.parked_gets_max == 100  # the guards table kept its keys


def test_an_unknown_group_or_queue_is_one_line() -> None:
    with pytest.raises(LookupError, match="no \\[\\[group\\]\\] with id = 9"):
        with_new_queue(BUS, 9, {"id": 30, "name": "X"})
    with pytest.raises(LookupError, match="queue 12 is not declared in group 1"):
        with_queue_values(BUS, 1, 12, {"messages_max": 1})


def test_the_file_is_replaced_whole_with_its_mode(tmp_path) -> None:
    path = tmp_path / "bus.toml"
    path.write_text(BUS)
    path.chmod(0o640)
    write_atomically(path, BUS + "# changed\n")
    assert path.read_text().endswith("# changed\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["bus.toml"]  # no temporary left


def test_a_linked_file_is_replaced_at_its_target_and_stays_linked(tmp_path) -> None:
    target = tmp_path / "real" / "bus.toml"
    target.parent.mkdir()
    target.write_text(BUS)
    link = tmp_path / "bus.toml"
    link.symlink_to(target)
    write_atomically(link, BUS + "# changed\n")
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text().endswith("# changed\n")
