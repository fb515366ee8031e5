"""What a configuration probe found the bus file took and should not (session 32):
each is refused in one line naming the file and the key, before a group starts.

- A `[[link]]` without `address` whose higher group listens on port 0: both groups
  started READY, the lower one logged "cannot dial group 2" once, and every message
  for the other group waited in the SAF for a link never dialed. `mrs serve` refuses
  either group (the file still loads: in-process buses wire port-0 links).
- A replicated group's own `listen` (nothing listens there) was where links dialed it
  (the instances are dialed in turn): with port 0 the lower group logged "cannot dial
  group 2" and never dialed the instances at all. The first instance's is used.
- A `[coordinator] prefix` with a newline, a tab or a NUL (a space was refused).
- Wrong types said in TOML's words: `[80, true]`, "an array", "a table" (they read
  `[80, True]`, "list", "dict").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.config.bus import ConfigError, parse_config
from mrs.tools.cli import main

GROUP = '[[group]]\nid = {id}\nname = "G{id}"\nlisten = "127.0.0.1:{port}"\ndata_dir = "g{id}"\n'
COORDINATOR = '[coordinator]\netcd = ["http://127.0.0.1:2379"]\n'
INSTANCES = "".join(
    f'[[group.instance]]\nname = "{n}"\nlisten = "127.0.0.1:710{i}"\n'
    f'replication = "127.0.0.1:720{i}"\ndata_dir = "{n}"\n'
    for i, n in enumerate("abc")
)
REPLICATED_2 = '[[group]]\nid = 2\nname = "G2"\n' + INSTANCES


def _group(group_id: int, port: int) -> str:
    return GROUP.format(id=group_id, port=port)


REFUSED = [
    (
        "prefix with a newline",
        COORDINATOR + 'prefix = "/mrs\\nprod"\n' + _group(1, 7001),
        "coordinator.prefix: must be a key path",
    ),
    (
        "prefix with a tab",
        COORDINATOR + 'prefix = "/mrs\\tprod"\n' + _group(1, 7001),
        "coordinator.prefix: must be a key path",
    ),
    (
        "prefix with a NUL",
        COORDINATOR + 'prefix = "/mrs\\u0000"\n' + _group(1, 7001),
        "coordinator.prefix: must be a key path",
    ),
    (
        "warn percents holding a boolean",
        _group(1, 7001) + "[group.ops]\njournal_warn_percent = [80, true]\n",
        "got [80, true]",
    ),
    (
        "warn percents a string",
        _group(1, 7001) + '[group.ops]\njournal_warn_percent = "80"\n',
        "got string '80'",
    ),
    (
        "ops an array of tables",
        _group(1, 7001) + "[[group.ops]]\n",
        "group[0].ops: must be a table ([group.ops]), got an array",
    ),
    (
        "tls a string",
        _group(1, 7001) + 'tls = "certs"\n',
        "group[0].tls: must be a table ([group.tls]), got string 'certs'",
    ),
    (
        "a guard an array",
        _group(1, 7001) + "[group.guards]\nparked_gets_max = [5]\n",
        "group[0].guards.parked_gets_max: must be an integer, got an array",
    ),
    (
        "a guard a table",
        _group(1, 7001) + "[group.guards]\nframe_s_max = {s = 1}\n",
        "group[0].guards.frame_s_max: must be a number, got a table",
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_the_file_is_refused_in_one_line_naming_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, tmp_path / "bus.toml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'bus.toml'}: ")
    assert expected in message


PORT_ZERO_LINK = _group(1, 0) + _group(2, 0) + "[[link]]\ngroups = [1, 2]\n"

UNDIALABLE = [
    ("higher group on port 0", PORT_ZERO_LINK, 1, "link[0]"),
    ("the port-0 group itself", PORT_ZERO_LINK, 2, "link[0]"),
    (
        "second link",
        _group(1, 7001)
        + _group(2, 7002)
        + _group(3, 0)
        + "[[link]]\ngroups = [1, 2]\n[[link]]\ngroups = [3, 2]\n[[link]]\ngroups = [1, 3]\n",
        1,
        "link[2]",
    ),
    (
        "lower group on port 0",
        _group(1, 0) + _group(2, 7002) + "[[link]]\ngroups = [1, 2]\n",
        1,
        None,
    ),
    (
        "a link address",
        _group(1, 7001) + _group(2, 0) + '[[link]]\ngroups = [1, 2]\naddress = "127.0.0.1:9000"\n',
        1,
        None,
    ),
    (
        "a replicated peer",
        COORDINATOR + _group(1, 0) + REPLICATED_2 + "[[link]]\ngroups = [1, 2]\n",
        1,
        None,
    ),
    (
        "not linked",
        _group(1, 7001) + _group(2, 0) + _group(3, 7003) + "[[link]]\ngroups = [1, 3]\n",
        1,
        None,
    ),
]


@pytest.mark.parametrize(
    ("text", "group_id", "key"), [r[1:] for r in UNDIALABLE], ids=[r[0] for r in UNDIALABLE]
)
def test_a_link_to_a_group_on_port_0_is_named_undialable(
    tmp_path: Path, text: str, group_id: int, key: str | None
) -> None:
    found = parse_config(text, tmp_path / "bus.toml").undialable_link(group_id)
    assert (found and found[0]) == key
    if found is not None:
        assert "listens on port 0" in found[1]
        assert "the link an address" in found[1]


def test_a_link_to_a_replicated_group_dials_its_instances_whatever_its_own_listen(
    tmp_path: Path,
) -> None:
    """The lower group dials the address the config gives its peer (the instances are
    then tried in turn): a replicated group's own `listen = "...:0"`, which nothing
    listens on, was that address, and the link was never dialed."""
    own_listen = REPLICATED_2.replace('name = "G2"\n', 'name = "G2"\nlisten = "127.0.0.1:0"\n')
    bus = parse_config(
        COORDINATOR + _group(1, 7001) + own_listen + "[[link]]\ngroups = [1, 2]\n",
        tmp_path / "bus.toml",
    )
    peer = bus.group(2)
    assert (peer.listen_host, peer.listen_port) == ("127.0.0.1", 7100)  # instance a's
    assert bus.undialable_link(1) is None


@pytest.mark.parametrize("group_id", [1, 2])
def test_mrs_serve_refuses_either_group_of_a_link_to_port_0(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    group_id: int,
) -> None:
    """Refused before anything is opened: no data directory is made, nothing listens."""

    async def started(*_args: object) -> None:  # it ran until a signal: fail instead
        raise AssertionError("the group started")

    monkeypatch.setattr("mrs.server.group_server.serve", started)
    config = tmp_path / "bus.toml"
    config.write_text(PORT_ZERO_LINK)
    assert main(["serve", "--config", str(config), "--group", str(group_id)]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err.strip() == (
        f"mrs: config error: {config}: link[0]: group 2 (G2) listens on port 0 (the system "
        "picks a port at each start), so group 1 cannot dial it over this link: give "
        "group 2's listen a fixed port, or the link an address"
    )
    assert not (tmp_path / f"g{group_id}").exists()
