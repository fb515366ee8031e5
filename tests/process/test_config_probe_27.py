"""Probes of a bus file written by hand (docs/configuration.md, docs/replication.md):
a listener on a `0.0.0.0` host takes its port on the machine's loopback too, so a
link `address` on that loopback, or an instance of the same group on it, is one
listener with it. Each is refused at load in one line naming the key and the address
it collides with (exit 2, nothing started, no data directory made), as the same
mistakes spelled with one host already were; addresses of other machines still load."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.config.bus import ConfigError, load_config
from sim.ports import free_port
from tests.cli_helpers import run_mrs

REFUSAL_S_MAX = 30.0
"""A refused config answers at once; a config taken starts a server that never ends."""


def _two_groups(tmp_path: Path, nyc_host: str, link_address: str) -> tuple[Path, int, int]:
    """bus.toml: NYC (group 1) on `nyc_host`, LDN (group 2) on 0.0.0.0, linked at
    `link_address` (format fields {nyc} and {ldn}: the two ports)."""
    nyc, ldn = free_port(), free_port()
    path = tmp_path / "bus.toml"
    path.write_text(
        f'[[group]]\nid = 1\nname = "NYC"\nlisten = "{nyc_host}:{nyc}"\ndata_dir = "g1"\n'
        f'[[group]]\nid = 2\nname = "LDN"\nlisten = "0.0.0.0:{ldn}"\ndata_dir = "g2"\n'
        f'[[link]]\ngroups = [1, 2]\naddress = "{link_address.format(nyc=nyc, ldn=ldn)}"\n'
    )
    return path, nyc, ldn


def _assert_refused(path: Path, args: list[str], key: str, *words: str) -> str:
    """`mrs ARGS --config PATH` refuses the file: exit 2, one line naming the file and
    `key`, no traceback, and no data directory beside the file."""
    result = run_mrs(*args, "--config", str(path), timeout_s=REFUSAL_S_MAX)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}: {key}: " in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    made = sorted(p.name for p in path.parent.iterdir() if p.is_dir())
    assert made == [], made
    return lines[0]


@pytest.mark.parametrize("spelling", ["127.0.0.1", "localhost"])
def test_a_link_address_on_the_loopback_of_the_dialers_wildcard_listen_is_refused(
    tmp_path: Path, spelling: str
) -> None:
    """NYC listens on 0.0.0.0:P and its link to LDN says `address = "127.0.0.1:P"`
    (NYC's own port, e.g. copied from the wrong group): the lower group dials the
    address, which is its own listener. Before, it loaded and NYC dialed itself for
    ever; the same address spelled `0.0.0.0:P` was refused."""
    path, nyc, _ = _two_groups(tmp_path, "0.0.0.0", spelling + ":{nyc}")
    for args in (["serve", "--group", "1"], ["status"]):
        line = _assert_refused(
            path, args, "link[0].address", f"0.0.0.0:{nyc}", "group[0].listen", "group 2"
        )
    assert f"{spelling}:{nyc}" in line


def test_a_link_address_on_the_loopback_of_the_peers_wildcard_listen_loads(
    tmp_path: Path,
) -> None:
    """What the check must leave alone: the higher group's own port on the loopback
    (its 0.0.0.0 listener takes it), and the lower group's port on another machine."""
    for address, port_of in (("127.0.0.1:{ldn}", 2), ("10.0.0.5:{nyc}", 1)):
        path, _, _ = _two_groups(tmp_path, "0.0.0.0", address)
        bus = load_config(path)
        (link,) = bus.links
        assert (link.address_host, link.address_port) == (
            address.partition(":")[0],
            bus.group(port_of).listen_port,
        )


def _replicated(tmp_path: Path, hosts: dict[str, tuple[str, str]], port: int) -> Path:
    """A replicated NYC: instance NAME on (listen host, replication host); a, b and c
    listen on `port`, `port + 1`, `port + 2` unless a test reuses one below."""
    path = tmp_path / "bus.toml"
    text = f'[coordinator]\netcd = ["http://127.0.0.1:{free_port()}"]\n'
    text += '[[group]]\nid = 1\nname = "NYC"\n'
    for name, (listen, replication) in hosts.items():
        text += (
            f'[[group.instance]]\nname = "{name}"\nlisten = "{listen}"\n'
            f'replication = "{replication}"\ndata_dir = "{name}"\n'
        )
    path.write_text(text.replace("PORT", str(port)))
    return path


def test_instances_of_one_group_on_a_wildcard_and_a_loopback_host_of_one_port_are_refused(
    tmp_path: Path,
) -> None:
    """Instance a listens on 0.0.0.0:P and b on 127.0.0.1:P (one machine, as in
    replication.md's example): one port, two listeners, and the second to start
    fails. Before, it loaded (only the same spelling was refused) and b's start ended
    in "the port is in use"; across groups the same addresses were refused."""
    port = free_port()
    path = _replicated(
        tmp_path,
        {
            "a": ("0.0.0.0:PORT", f"127.0.0.1:{free_port()}"),
            "b": ("127.0.0.1:PORT", f"127.0.0.1:{free_port()}"),
            "c": (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"),
        },
        port,
    )
    for args in (["serve", "--group", "1", "--instance", "b"], ["status"]):
        _assert_refused(
            path,
            args,
            "group[0].instance[1].listen",
            f"127.0.0.1:{port} is also used by group[0].instance[0]",
            f"0.0.0.0:{port}",
        )


def test_an_instance_whose_replication_is_on_its_own_wildcard_listens_port_is_refused(
    tmp_path: Path,
) -> None:
    """An instance's replication address on the loopback of its own 0.0.0.0 listen:
    the instance could not start at all (its two listeners on one port)."""
    port = free_port()
    path = _replicated(
        tmp_path,
        {
            "a": ("0.0.0.0:PORT", "127.0.0.1:PORT"),
            "b": (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"),
            "c": (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"),
        },
        port,
    )
    message = str(_load_error(path))
    assert "group[0].instance[0].replication" in message
    assert f"127.0.0.1:{port} is also its listen address" in message


def test_instances_on_other_machines_may_share_a_port(tmp_path: Path) -> None:
    """What the check must leave alone: one port on three machines, one of them
    listening on every address of its own."""
    path = _replicated(
        tmp_path,
        {
            "a": ("0.0.0.0:PORT", "0.0.0.0:7201"),
            "b": ("10.0.0.2:PORT", "10.0.0.2:7201"),
            "c": ("10.0.0.3:PORT", "10.0.0.3:7201"),
        },
        7101,
    )
    assert [i.listen_port for i in load_config(path).group(1).instances] == [7101] * 3


def _load_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value
