"""[[group.instance]] and [coordinator]: what a replicated group's config must hold,
refused at load with one line naming the key; a group without instances is as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.config.bus import ConfigError, parse_config

COORDINATOR = '[coordinator]\netcd = ["http://127.0.0.1:2379"]\n'


def instance(name: str, port: int, data_dir: str | None = None, replication: int = 0) -> str:
    return (
        f'[[group.instance]]\nname = "{name}"\nlisten = "127.0.0.1:{port}"\n'
        f'replication = "127.0.0.1:{replication or port + 100}"\n'
        f'data_dir = "{data_dir or name}"\n'
    )


def bus(instances: str, coordinator: str = COORDINATOR) -> str:
    return coordinator + '[[group]]\nid = 1\nname = "NYC"\n' + instances


def refused(text: str, tmp_path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, tmp_path / "bus.toml")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_three_instances_load(tmp_path: Path) -> None:
    text = bus(instance("a", 7001) + instance("b", 7002) + instance("c", 7003))
    config = parse_config(text, tmp_path / "bus.toml")
    group = config.group(1)
    assert [i.name for i in group.instances] == ["a", "b", "c"]
    assert group.instance("b").replication_port == 7102
    assert group.instance("c").data_dir == (tmp_path / "c").resolve()
    assert (group.listen_host, group.listen_port) == ("127.0.0.1", 7001)  # the first's
    assert config.coordinator is not None
    assert config.coordinator.etcd == ("http://127.0.0.1:2379",)


def test_two_instances_refused(tmp_path: Path) -> None:
    message = refused(bus(instance("a", 7001) + instance("b", 7002)), tmp_path)
    assert "group[0].instance" in message and "at least 3 instances" in message


def test_shared_data_dir_refused(tmp_path: Path) -> None:
    text = bus(instance("a", 7001) + instance("b", 7002, "a") + instance("c", 7003))
    message = refused(text, tmp_path)
    assert "group[0].instance[1].data_dir" in message and "also the data_dir" in message


def test_shared_replication_address_refused(tmp_path: Path) -> None:
    text = bus(instance("a", 7001) + instance("b", 7002, replication=7101) + instance("c", 7003))
    message = refused(text, tmp_path)
    assert "group[0].instance[1].replication" in message
    assert "127.0.0.1:7101 is also used by group[0].instance[0]" in message


def test_replication_address_equal_to_its_own_listen_refused(tmp_path: Path) -> None:
    text = bus(instance("a", 7001) + instance("b", 7002, replication=7002) + instance("c", 7003))
    message = refused(text, tmp_path)
    assert "group[0].instance[1].replication: 127.0.0.1:7002 is also its listen address" in message


def test_instances_without_coordinator_refused(tmp_path: Path) -> None:
    text = bus(instance("a", 7001) + instance("b", 7002) + instance("c", 7003), coordinator="")
    message = refused(text, tmp_path)
    assert "group[0].instance" in message and "[coordinator]" in message


def test_coordinator_without_endpoints_refused(tmp_path: Path) -> None:
    text = bus(
        instance("a", 7001) + instance("b", 7002) + instance("c", 7003),
        "[coordinator]\netcd = []\n",
    )
    assert "coordinator.etcd" in refused(text, tmp_path)


def test_an_etcd_endpoint_without_its_scheme_is_named(tmp_path: Path) -> None:
    text = bus(
        instance("a", 7001) + instance("b", 7002) + instance("c", 7003),
        '[coordinator]\netcd = ["http://10.0.0.1:2379", "10.0.0.2:2379"]\n',
    )
    message = refused(text, tmp_path)
    assert "coordinator.etcd[1]: must be a URL" in message and "'10.0.0.2:2379'" in message


@pytest.mark.parametrize(
    "endpoint", ["http://127.0.0.1:99999", "http://:2379", "http://127.0.0.1:0", "ftp://h:2379"]
)
def test_an_etcd_endpoint_no_client_can_dial_is_named(tmp_path: Path, endpoint: str) -> None:
    """Before, any text after http:// was taken, and an instance logged connection
    errors forever instead of the config saying what is wrong."""
    text = bus(
        instance("a", 7001) + instance("b", 7002) + instance("c", 7003),
        f'[coordinator]\netcd = ["{endpoint}"]\n',
    )
    message = refused(text, tmp_path)
    assert "coordinator.etcd[0]: must be a URL" in message and repr(endpoint) in message


def test_group_without_instances_is_unreplicated(tmp_path: Path) -> None:
    text = '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
    config = parse_config(text, tmp_path / "bus.toml")
    assert config.group(1).instances == ()
    assert config.coordinator is None


def test_coordinator_prefix(tmp_path: Path) -> None:
    three = instance("a", 7001) + instance("b", 7002) + instance("c", 7003)
    config = parse_config(bus(three), tmp_path / "bus.toml")
    assert config.coordinator is not None and config.coordinator.prefix == "/mrs"
    chosen = bus(three, COORDINATOR + 'prefix = "/mrs/prod"\n')
    coordinator = parse_config(chosen, tmp_path / "bus.toml").coordinator
    assert coordinator is not None and coordinator.prefix == "/mrs/prod"
    assert "coordinator.prefix" in refused(bus(three, COORDINATOR + 'prefix = "mrs/"\n'), tmp_path)


OTHER_GROUP = '[[group]]\nid = 2\nname = "LDN"\nlisten = "127.0.0.1:{port}"\ndata_dir = "g2"\n'


@pytest.mark.parametrize("port", [7003, 7102])
def test_another_groups_listen_on_an_instances_address_refused(tmp_path: Path, port: int) -> None:
    """An instance's client or replication address used by another group's server:
    one of them would take the other's connections (it was accepted: found by a probe)."""
    text = bus(instance("a", 7001) + instance("b", 7002) + instance("c", 7003))
    message = refused(text + OTHER_GROUP.format(port=port), tmp_path)
    key = "listen" if port == 7003 else "replication"
    owner = "group[0].instance[2]" if port == 7003 else "group[0].instance[1]"
    assert f"group[1].listen: 127.0.0.1:{port} is also the address of {owner}.{key}" in message


def test_another_replicated_groups_instances_on_the_same_address_refused(tmp_path: Path) -> None:
    first = bus(instance("a", 7001) + instance("b", 7002) + instance("c", 7003))
    second = (
        '[[group]]\nid = 2\nname = "LDN"\n'
        + instance("d", 7101, replication=7501)
        + instance("e", 7502)
        + instance("f", 7503)
    )
    message = refused(first + second, tmp_path)
    assert "group[1].instance[0].listen: 127.0.0.1:7101 is also the address of " in message
    assert "group[0].instance[0].replication" in message


def test_an_address_spelled_localhost_is_the_loopback_address(tmp_path: Path) -> None:
    """`localhost:P` and `127.0.0.1:P` are one listener: a config that spelled them
    differently started a second instance on a running instance's port."""
    text = bus(
        instance("a", 7001)
        + instance("b", 7002).replace('"127.0.0.1:7102"', '"localhost:7101"')
        + instance("c", 7003)
    )
    message = refused(text, tmp_path)
    assert (
        "group[0].instance[1].replication: localhost:7101 is also used by group[0].instance[0]"
        in message
    )
