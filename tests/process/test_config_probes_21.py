"""Probes of a bus file written by hand and of `mrs serve` starting on it: the [auth]
table's mistakes read like every other table's, a name is refused at load when a
lookup by name could not carry it, data directories of a bus never nest, and a
`[group.ops]` port another process holds fails the start before the journals are
touched (operations.md: a failed start leaves the journals as they were)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from clients import connect_sync
from mrs.config.bus import ConfigError, load_config
from mrs.model import Address, DeliveryMode, Uma
from sim.etcd import write_replicated_config
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs, status_json
from tests.process.test_security_probes_21 import encrypted_client_key

GROUP = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "g1"
"""


def _refused(tmp_path: Path, text: str) -> ConfigError:
    """The error loading `text` as bus.toml raises (it must raise one)."""
    path = tmp_path / "bus.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value


def _one_line(result, code: int, *words: str) -> str:
    """What an operator reads: one line, the exit code, no traceback, the words."""
    text = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "\n" not in text and "Traceback" not in text, text
    for word in words:
        assert word in text, (word, text)
    return text


@pytest.mark.parametrize(
    ("auth", "key", "words"),
    [
        (
            '[auth]\ncredential = "c.toml"\nlink_secrets = "s"\n',
            "auth.credential",
            ("did you mean 'credentials'?", "allowed keys: credentials, enabled, link_secrets"),
        ),
        ("[auth]\nenabled = 1\n", "auth.enabled", ("got integer 1",)),
        (
            '[auth]\ncredentials = 5\nlink_secrets = "s"\n',
            "auth.credentials",
            ("must be a path (a string), got integer 5",),
        ),
        ('[auth]\ncredentials = "c.toml"\n', "auth.link_secrets", ("required key is missing",)),
        ("[auth]\nenabled = false\nlink_secrets = 5\n", "auth.link_secrets", ("got integer 5",)),
    ],
    ids=[
        "typo",
        "enabled-not-bool",
        "credentials-not-string",
        "link-secrets-missing",
        "switched-off-but-wrong",
    ],
)
def test_auth_table_mistakes_name_the_key_and_what_was_wrong(
    tmp_path: Path, auth: str, key: str, words: tuple[str, ...]
) -> None:
    """configuration.md: unknown keys are refused "in every table, with the key meant
    when one is close". [auth] named only the known keys, said `credentials = 5` "is
    required", and never said what it got."""
    error = _refused(tmp_path, GROUP + auth)
    assert error.key == key
    for word in words:
        assert word in error.problem, error.problem


def test_auth_that_is_not_a_table_is_named_without_a_dangling_dot(tmp_path: Path) -> None:
    """`auth = 5` was reported at key "auth." and did not say what it got."""
    (tmp_path / "bus.toml").write_text("auth = 5\n" + GROUP)
    result = run_mrs("serve", "--config", str(tmp_path / "bus.toml"), "--group", "1")
    line = _one_line(result, 2, "bus.toml: auth: must be a table ([auth]), got integer 5")
    assert "auth.:" not in line


@pytest.mark.parametrize(
    "where",
    ["group", "queue", "instance"],
)
def test_a_name_longer_than_a_lookup_carries_is_refused_at_load(tmp_path: Path, where: str) -> None:
    """A Locate, a ShowPending or a journal select carries a queue as text of at most
    256 characters; a config declaring a longer name loaded, and its queue could
    then be attached but never located or counted by name (BADPARAM)."""
    long_name = "N" * 128
    if where == "instance":
        path = write_replicated_config(tmp_path, "http://127.0.0.1:2379", "")
        path.write_text(path.read_text().replace('name = "a"', f'name = "{long_name}"'))
        key = "group[0].instance[0].name"
        text = path.read_text()
    elif where == "queue":
        text = GROUP + f'[[group.queue]]\nid = 10\nname = "{long_name}"\n'
        key = "group[0].queue[0].name"
    else:
        text = GROUP.replace('"NYC"', f'"{long_name}"')
        key = "group[0].name"
    error = _refused(tmp_path, text)
    assert error.key == key
    assert "at most 127 characters, got 128" in error.problem


def test_names_are_bounded_where_a_locate_stops_carrying_them(tmp_path: Path) -> None:
    """The bound is where the lookup's is: GROUP.QUEUE of two names of the longest
    length a config takes is located by a real server, and one character more is
    refused at load (it was taken, and could not be located)."""
    group_name, queue_name = "G" * 127, "Q" * 127
    (tmp_path / "bus.toml").write_text(
        GROUP.replace('"NYC"', f'"{group_name}"')
        + f'[[group.queue]]\nid = 10\nname = "{queue_name}"\n'
    )
    server = GroupProcess(tmp_path / "bus.toml", 1)
    address = server.start()
    try:
        with connect_sync(address, queue=queue_name) as client:
            assert client.locate(f"{group_name}.{queue_name}") == Address(1, 10)
    finally:
        assert server.terminate() == 0
    longer = (tmp_path / "bus.toml").read_text().replace(queue_name, queue_name + "Q")
    assert _refused(tmp_path, longer).key == "group[0].queue[0].name"


@pytest.mark.parametrize(
    ("first", "second", "words"),
    [
        ("g1", "g1/journals", ("is inside", "the data_dir of group[0]")),
        ("g1/sub", "g1", ("holds", "the data_dir of group[0]")),
    ],
    ids=["inside-another", "holding-another"],
)
def test_a_data_dir_inside_another_is_refused_at_load(
    tmp_path: Path, first: str, second: str, words: tuple[str, ...]
) -> None:
    """Two groups on nested directories both ran; journal-repair.md's procedure moves
    a damaged group's whole data_dir aside, which took the other group's journals
    with it, and that group then started empty where they had been."""
    text = GROUP.replace('"g1"', f'"{first}"') + GROUP.replace("id = 1", "id = 2").replace(
        '"NYC"', '"LDN"'
    ).replace('"g1"', f'"{second}"')
    error = _refused(tmp_path, text)
    assert error.key == "group[1].data_dir"
    for word in words:
        assert word in error.problem, error.problem


def test_an_instance_inside_another_instances_data_dir_is_refused(tmp_path: Path) -> None:
    """replication.md: each instance keeps its own disk; one inside another's loaded."""
    path = write_replicated_config(tmp_path, "http://127.0.0.1:2379", "")
    text = path.read_text().replace('data_dir = "b"', 'data_dir = "a/b"')
    error = _refused(tmp_path, text)
    assert error.key == "group[0].instance[1].data_dir"
    assert "is inside" in error.problem and "group[0].instance[0]" in error.problem


@pytest.mark.parametrize("key", ["metrics_listen", "web_listen"])
def test_an_ops_port_in_use_fails_the_start_before_the_journals(tmp_path: Path, key: str) -> None:
    """The server took metrics_listen and web_listen only after it had opened the
    journals and committed a boot epoch: such a failed start bumped the epoch (a
    restart to the `mrs_epoch` alert) and left journals behind."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path = tmp_path / "bus.toml"
        path.write_text(GROUP + f'[group.ops]\n{key} = "127.0.0.1:{port}"\n')
        result = run_mrs("serve", "--config", str(path), "--group", "1")
        _one_line(result, 1, f"ops.{key} = 127.0.0.1:{port}", "in use", f"change {key}")
        assert not (tmp_path / "g1" / "journals").exists()
    path.write_text(GROUP)
    server = GroupProcess(path, 1)
    address = server.start()
    try:
        assert status_json("--address", address)["epoch"] == 1  # the failed start: none
    finally:
        assert server.terminate() == 0


@pytest.mark.parametrize(
    ("first_ops", "second_ops", "key", "other"),
    [
        (
            "",
            'metrics_listen = "127.0.0.1:{listen}"',
            "group[1].ops.metrics_listen",
            "group[0].listen",
        ),
        (
            'web_listen = "127.0.0.1:{port}"',
            'metrics_listen = "localhost:{port}"',
            "group[1].ops.metrics_listen",
            "group[0].ops.web_listen",
        ),
    ],
    ids=["metrics-on-another-groups-listen", "metrics-on-another-groups-web"],
)
def test_an_ops_endpoint_on_another_groups_port_is_refused_at_load(
    tmp_path: Path, first_ops: str, second_ops: str, key: str, other: str
) -> None:
    """A group's listen is checked against every other group's; its metrics and web
    ports were not. The group started second then failed with "the port is in use by
    another process; stop it or change listen", naming neither key: the process was
    the bus's own other group."""
    listen, port = free_port(), free_port()
    first = GROUP.replace("127.0.0.1:0", f"127.0.0.1:{listen}") + (
        f"[group.ops]\n{first_ops}\n" if first_ops else ""
    )
    second = GROUP.replace("id = 1", "id = 2").replace('"NYC"', '"LDN"').replace('"g1"', '"g2"')
    ops = second_ops.replace("{listen}", str(listen))
    text = first + second + f"[group.ops]\n{ops}\n"
    (tmp_path / "bus.toml").write_text(text.replace("{port}", str(port)))
    result = run_mrs("serve", "--config", str(tmp_path / "bus.toml"), "--group", "2")
    line = _one_line(result, 2, "config error", key, other)
    assert line.index(key) < line.index(other)


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("http://127.0.0.1:9101", ("not a URL: drop 'http://', e.g. '127.0.0.1:9101'",)),
        ("127.0.0.1:9101/metrics", ("got '9101/metrics'",)),
    ],
    ids=["url", "url-path"],
)
def test_an_address_pasted_as_a_url_says_so(
    tmp_path: Path, address: str, words: tuple[str, ...]
) -> None:
    """A metrics URL pasted into metrics_listen was told "an IPv6 host must be in
    brackets", or "port must be a number ..., got 12 characters": neither says what
    to change."""
    error = _refused(tmp_path, GROUP + f'[group.ops]\nmetrics_listen = "{address}"\n')
    assert error.key == "group[0].ops.metrics_listen"
    for word in words:
        assert word in error.problem, error.problem


@pytest.mark.parametrize(
    ("address", "owner"),
    [("127.0.0.1:{low}", "group[0].listen"), ("localhost:{web}", "group[1].ops.web_listen")],
    ids=["the-dialers-own-listen", "the-peers-web-view"],
)
def test_a_link_address_the_bus_listens_on_for_something_else_is_refused(
    tmp_path: Path, address: str, owner: str
) -> None:
    """`[[link]] address` copied from the lower group's own listen loaded: the group
    dialed itself for ever, logging "group 1 has no link from group 1", which names
    neither the link nor its key."""
    low, web = free_port(), free_port()
    text = (
        GROUP.replace("127.0.0.1:0", f"127.0.0.1:{low}")
        + GROUP.replace("id = 1", "id = 2").replace('"NYC"', '"LDN"').replace('"g1"', '"g2"')
        + f'[group.ops]\nweb_listen = "127.0.0.1:{web}"\n'
        + f'[[link]]\ngroups = [1, 2]\naddress = "{address}"\n'.format(low=low, web=web)
    )
    error = _refused(tmp_path, text)
    assert error.key == "link[0].address"
    assert owner in error.problem and "not where group 2 takes links" in error.problem


def test_a_second_serve_of_a_running_group_names_the_server_not_a_port(tmp_path: Path) -> None:
    """With a fixed `listen` (as every production file has), a second `mrs serve` of
    a running group said "the port is in use by another process; stop it or change
    listen": the process to stop was the group itself. It names the running server
    now, and the first keeps serving what it stored."""
    listen, metrics = free_port(), free_port()
    path = tmp_path / "bus.toml"
    path.write_text(
        GROUP.replace("127.0.0.1:0", f"127.0.0.1:{listen}")
        + f'[group.ops]\nmetrics_listen = "127.0.0.1:{metrics}"\n'
        + '[[group.queue]]\nid = 10\nname = "ORDERS"\n'
    )
    first = GroupProcess(path, 1)
    address = first.start()
    try:
        with connect_sync(address, queue="ORDERS") as client:
            client.put(b"kept", target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
        result = run_mrs("serve", "--config", str(path), "--group", "1")
        _one_line(result, 1, "data_dir", "in use by another mrs serve", f"pid {first.process.pid}")
        with connect_sync(address, queue="ORDERS") as client:
            assert client.get(timeout=5).body == b"kept"
    finally:
        assert first.terminate() == 0


def test_a_tls_key_with_a_passphrase_is_one_line_naming_the_key(tmp_path: Path) -> None:
    """A `[group.tls] key` with a passphrase made OpenSSL prompt `Enter PEM pass
    phrase:` on the terminal at every load of the config (mrs serve, mrs dump, ...),
    and with no terminal every tool stopped with `mrs: Invalid argument`, naming no
    file. A group cannot type a passphrase: the config is refused naming the key."""
    cert, key = encrypted_client_key(tmp_path)
    tls = f'[group.tls]\nca = "{cert}"\ncert = "{cert}"\nkey = "{key}"\n'
    error = _refused(tmp_path, GROUP + tls)
    assert error.key == "group[0].tls.key"
    assert "the key is encrypted (it has a passphrase)" in error.problem, error.problem
