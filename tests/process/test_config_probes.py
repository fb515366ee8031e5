"""Probes of the bus file as an operator writes and edits it: paths the OS cannot take
are refused naming their key, a guard's default does not undercut message_bytes_max,
and `mrs admin set-limits` / `add-queue` change exactly what was asked in a file laid
out by hand (comments kept, another queue never touched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.config.bus import ConfigError, load_config, parse_config
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs

pytestmark = pytest.mark.xdist_group("admin")

GROUP = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "g1"
"""

HAND_WRITTEN = """\
# the operator's bus
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group.queue]]
id = 10
name = "ORDERS"
unconfirmed_max = 100   # sized for the nightly batch
[[ group . queue ]]     # written by another tool
id = 11
name = "FILLS"
messages_max = 50

# ---- London ----
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:0"
data_dir = "g2"
"""


@pytest.fixture
def hand_written(tmp_path: Path):
    """Group 1 of HAND_WRITTEN, running; yields (address, config path)."""
    config = tmp_path / "bus.toml"
    config.write_text(HAND_WRITTEN)
    server = GroupProcess(config, 1)
    address = server.start()
    yield address, config
    server.terminate()


def _admin(address: str, *argv: str):
    return run_mrs("admin", *argv, "--address", address)


def test_set_limits_never_lands_in_another_queue_of_a_file_laid_out_by_hand(
    hand_written,
) -> None:
    """A header the line scan does not know (`[[ group . queue ]]`) made FILLS's lines
    look like ORDERS's: the limit asked for ORDERS was written into FILLS, the answer
    said done, and a restart applied it to the wrong queue."""
    address, config = hand_written
    refused = _admin(address, "set-limits", "ORDERS", "--messages-max", "7")
    assert refused.returncode != 0 and len(refused.stderr.splitlines()) == 1, refused
    assert "cannot change queue 1.10" in refused.stderr
    assert config.read_text() == HAND_WRITTEN
    queues = parse_config(config.read_text(), config).groups[1].queues
    assert (queues[10].messages_max, queues[11].messages_max) == (10000, 50)


def test_set_limits_keeps_the_comment_and_add_queue_the_next_groups_heading(
    hand_written,
) -> None:
    """The changed line keeps its comment, and a new queue goes after its group's last
    key, not under the comment that heads group 2."""
    address, config = hand_written
    config.write_text(HAND_WRITTEN.replace("[[ group . queue ]]", "[[group.queue]]"))
    changed = _admin(address, "set-limits", "ORDERS", "--unconfirmed-max", "7")
    assert changed.returncode == 0, changed.stderr
    added = _admin(address, "add-queue", "30", "RETRY")
    assert added.returncode == 0, added.stderr
    text = config.read_text()
    assert "unconfirmed_max = 7   # sized for the nightly batch\n" in text
    assert 'messages_max = 50\n[[group.queue]]\nid = 30\nname = "RETRY"\n\n# ---- London' in text
    bus = parse_config(text, config)
    assert bus.groups[1].queues[11].messages_max == 50 and 30 not in bus.groups[2].queues


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('[auth]\ncredentials = "c\\u0000"\nlink_secrets = "s"\n', "auth.credentials"),
        ('[auth]\ncredentials = "~mrs-no-such-user/c"\nlink_secrets = "s"\n', "auth.credentials"),
        ('protection = "p\\u0000.toml"\n', "protection"),
        ('[group.ops]\npcj_archive_dir = "~mrs-no-such-user/a"\n', "group[0].ops.pcj_archive_dir"),
    ],
)
def test_a_path_the_os_cannot_take_is_a_config_error_naming_its_key(
    tmp_path: Path, table: str, key: str
) -> None:
    """Before: `mrs serve` died "unexpected error: ValueError: embedded null byte" (or
    RuntimeError from `~user`), or started and failed every automatic PCJ archive."""
    config = tmp_path / "bus.toml"
    if table.startswith("[group."):
        config.write_text(GROUP + table)
    else:
        config.write_text(table + GROUP)
    result = run_mrs("serve", "--config", str(config), "--group", "1", timeout_s=30)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"mrs: config error: {config}: {key}: "), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_large_message_bytes_max_raises_the_default_byte_guards() -> None:
    """With message_bytes_max 512 MiB, the default connection_bytes_max (256 MiB)
    answered EXCEEDQUOTA to a 300 MiB put on an idle connection; a guard the file sets
    stays as set."""
    limits = "[group.limits]\nmessage_bytes_max = 536870912\njournal_bytes_max = 2147483648\n"
    guards = parse_config(GROUP + limits, "bus.toml").groups[1].guards
    assert guards.connection_bytes_max == guards.queue_bytes_max == 536870912
    text = GROUP + limits + "[group.guards]\nqueue_bytes_max = 4096\n"
    guards = parse_config(text, "bus.toml").groups[1].guards
    assert (guards.connection_bytes_max, guards.queue_bytes_max) == (536870912, 4096)


@pytest.mark.parametrize(
    "endpoint", ["http://[::1", "http://127.0.0.1:2379?x", "http://etcd 1:2379"]
)
def test_an_etcd_url_that_cannot_be_read_or_called_is_a_config_error(
    tmp_path: Path, endpoint: str
) -> None:
    """`http://[::1` (a bracket left open) was urlsplit's ValueError: `mrs serve` said
    "unexpected error"; a query or a blank was taken, and every etcd call went astray."""
    config = tmp_path / "bus.toml"
    config.write_text(f'[coordinator]\netcd = ["{endpoint}"]\n' + GROUP)
    result = run_mrs("serve", "--config", str(config), "--group", "1", timeout_s=30)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"mrs: config error: {config}: coordinator.etcd[0]: ")


@pytest.mark.parametrize(
    ("ops", "key"),
    [
        ("web_admin = true\n", "web_admin"),
        ("pcj_archive_interval_s = 60\n", "pcj_archive_interval_s"),
    ],
)
def test_an_ops_key_that_does_nothing_alone_is_refused(tmp_path: Path, ops: str, key: str) -> None:
    """Taken before, and nothing happened: no page to act on without web_listen, no
    automatic PCJ archive without pcj_archive_after_s."""
    config = tmp_path / "bus.toml"
    config.write_text(GROUP + "[group.ops]\n" + ops)
    with pytest.raises(ConfigError, match=rf"^{config}: group\[0\]\.ops\.{key}: needs "):
        load_config(config)
