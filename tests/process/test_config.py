"""The bus configuration loads what the schema promises and refuses everything else
with one line naming the file, the key and the problem."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from mrs.config.bus import (
    DEAD_LETTER_QUEUE_CONFIG,
    BusConfig,
    ConfigError,
    GroupConfig,
    Limits,
    LinkConfig,
    QueueConfig,
    load_config,
    parse_config,
)
from mrs.model import DEAD_LETTER_QUEUE, Address, ConfirmStyle

FULL = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:7001"
data_dir = "g1"
pcj_default = true
[group.limits]
dqf_messages_max = 500
journal_bytes_max = 4194304
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
messages_max = 20
unconfirmed_max = 5
permanent = false
[[group.queue]]
id = 11
name = "AUDIT"
confirm = "implicit"

[[group]]
id = 2
name = "LDN"
listen = "[::1]:0"
data_dir = "/srv/mrs/g2"
[[group.queue]]
id = 20
name = "ORDERS"
[[group.queue]]
id = 21
name = "FILLS"
confirm = "explicit-out-of-order"

[[group]]
id = 3
name = "TYO"
listen = "localhost:7003"
data_dir = "../g3"

[[link]]
groups = [2, 1]
address = "127.0.0.1:9000"

[[link]]
groups = [2, 3]
"""

MINIMAL_GROUP = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:7001"
data_dir = "g1"
"""


@pytest.fixture
def bus(tmp_path: Path) -> BusConfig:
    config_dir = tmp_path / "etc"
    config_dir.mkdir()
    config_file = config_dir / "bus.toml"
    config_file.write_text(FULL)
    return load_config(config_file)


def test_full_config_loads(bus: BusConfig, tmp_path: Path) -> None:
    assert bus.path == tmp_path / "etc" / "bus.toml"
    assert list(bus.groups) == [1, 2, 3]
    nyc = bus.group(1)
    assert nyc.name == "NYC"
    assert (nyc.listen_host, nyc.listen_port) == ("127.0.0.1", 7001)
    assert nyc.data_dir == (tmp_path / "etc" / "g1").resolve()
    assert nyc.data_dir.is_absolute()
    assert nyc.pcj_default is True
    assert nyc.limits == Limits(
        dqf_messages_max=500,
        saf_messages_max=100_000,
        message_bytes_max=1_048_576,
        journal_bytes_max=4_194_304,
    )
    assert nyc.queues[10] == QueueConfig(
        id=10,
        name="ORDERS",
        confirm=ConfirmStyle.EXPLICIT_IN_ORDER,
        messages_max=20,
        unconfirmed_max=5,
        permanent=False,
    )
    assert nyc.queues[11].confirm is ConfirmStyle.IMPLICIT


def test_defaults_applied(bus: BusConfig, tmp_path: Path) -> None:
    ldn = bus.group(2)
    assert (ldn.listen_host, ldn.listen_port) == ("::1", 0)
    assert ldn.data_dir == Path("/srv/mrs/g2")
    assert ldn.pcj_default is False
    assert ldn.limits == Limits()
    assert ldn.limits.journal_bytes_max == 1 << 30
    assert ldn.queues[20] == QueueConfig(
        id=20,
        name="ORDERS",
        confirm=ConfirmStyle.EXPLICIT_IN_ORDER,
        messages_max=10000,
        unconfirmed_max=1000,
        permanent=True,
    )
    assert ldn.queues[21].confirm is ConfirmStyle.EXPLICIT_OUT_OF_ORDER
    assert bus.group(3).data_dir == (tmp_path / "g3").resolve()


def test_dead_letter_queue_in_every_group(bus: BusConfig) -> None:
    expected = QueueConfig(
        id=96,
        name="DLQ",
        confirm=ConfirmStyle.EXPLICIT_OUT_OF_ORDER,
        messages_max=10000,
        unconfirmed_max=10000,
        permanent=True,
        recoverable=False,
    )
    assert expected == DEAD_LETTER_QUEUE_CONFIG
    for group in bus.groups.values():
        assert group.queues[DEAD_LETTER_QUEUE] == expected
        assert group.queue_by_name("DLQ").id == DEAD_LETTER_QUEUE
    assert list(bus.group(3).queues) == [DEAD_LETTER_QUEUE]
    assert list(bus.group(1).queues) == [10, 11, 96]


def test_links(bus: BusConfig) -> None:
    assert bus.links == (
        LinkConfig(groups=(1, 2), address_host="127.0.0.1", address_port=9000),
        LinkConfig(groups=(2, 3), address_host=None, address_port=None),
    )
    assert bus.group(1).links_to() == (2,)
    assert bus.group(2).links_to() == (1, 3)
    assert bus.group(3).links_to() == (2,)
    assert bus.link_between(2, 1) is bus.links[0]
    assert bus.link_between(1, 3) is None


def test_minimal_config(tmp_path: Path) -> None:
    bus = parse_config(MINIMAL_GROUP, tmp_path / "bus.toml")
    (group,) = bus.groups.values()
    assert group.links_to() == ()
    assert bus.links == ()
    assert group.data_dir == tmp_path.resolve() / "g1"


def test_config_is_frozen(bus: BusConfig) -> None:
    with pytest.raises(AttributeError):
        bus.group(1).name = "X"  # type: ignore[misc]


def test_lookup_errors(bus: BusConfig) -> None:
    with pytest.raises(LookupError, match=r"no group 9 .*\(groups: 1, 2, 3\)"):
        bus.group(9)
    with pytest.raises(LookupError, match="no queue named 'NOPE'"):
        bus.group(1).queue_by_name("NOPE")
    assert isinstance(bus.group(1), GroupConfig)
    assert bus.group(1).queue(10).name == "ORDERS"
    with pytest.raises(LookupError, match="has no queue 12"):
        bus.group(1).queue(12)


# -- resolve -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "default_group", "expected"),
    [
        ("2.20", 1, Address(2, 20)),
        ("2.77", 1, Address(2, 77)),  # numeric: returned though not configured
        ("9.5", 1, Address(9, 5)),  # numeric: returned though the group is not configured
        ("ORDERS", 1, Address(1, 10)),
        ("ORDERS", 2, Address(2, 20)),
        ("DLQ", 3, Address(3, 96)),
        ("33", 2, Address(2, 33)),
        ("NYC.ORDERS", 2, Address(1, 10)),
        ("LDN.ORDERS", 1, Address(2, 20)),
        ("NYC.20", 2, Address(1, 20)),
        ("2.FILLS", 1, Address(2, 21)),
        ("TYO.DLQ", 1, Address(3, 96)),
        (" 1.10 ", 2, Address(1, 10)),
    ],
)
def test_resolve(bus: BusConfig, text: str, default_group: int, expected: Address) -> None:
    assert bus.resolve(text, default_group) == expected


@pytest.mark.parametrize(
    ("text", "default_group", "message"),
    [
        ("FILLS", 1, r"group 1 \(NYC\) has no queue named 'FILLS'"),
        ("ORDERS", 9, "no group 9"),
        ("PAR.ORDERS", 1, "no group named 'PAR'"),
        ("NYC.NOPE", 1, "no queue named 'NOPE'"),
        ("9.ORDERS", 1, "no group 9"),
        ("PAR.20", 1, "no group named 'PAR'"),
        ("", 1, "not a queue address"),
        ("1.", 1, "not a queue address"),
        (".10", 1, "not a queue address"),
        ("1.2.3", 1, "not a queue address"),
        ("0.10", 1, "group 0 out of range"),
        ("1.0", 1, "queue 0 out of range"),
        ("1.1000", 1, "queue 1000 out of range"),
        ("32001.1", 1, "group 32001 out of range"),
        ("NYC.-1", 1, "not a queue id or name"),
        ("N-Y.1", 1, "not a group id or name"),
    ],
)
def test_resolve_errors(bus: BusConfig, text: str, default_group: int, message: str) -> None:
    with pytest.raises(LookupError, match=message):
        bus.resolve(text, default_group)


# -- errors --------------------------------------------------------------------


def _queue(**fields: object) -> str:
    """MINIMAL_GROUP plus one queue with the given fields (TOML literals)."""
    body = {"id": "10", "name": '"ORDERS"', **fields}
    return MINIMAL_GROUP + "[[group.queue]]\n" + "".join(f"{k} = {v}\n" for k, v in body.items())


SECOND_GROUP = """\
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:7002"
data_dir = "g2"
"""

BAD_CONFIGS = {
    "unknown top key": ("grup = 1\n" + MINIMAL_GROUP, "grup", "unknown key"),
    "unknown group key": (
        MINIMAL_GROUP.replace("data_dir", "datadir"),
        "group[0].datadir",
        "unknown key (did you mean 'data_dir'?); "
        "allowed keys: data_dir, dead_letter_queue, dead_letter_queue_recoverable, guards, id",
    ),
    "unknown queue key": (
        _queue(confrim='"implicit"'),
        "group[0].queue[0].confrim",
        "did you mean 'confirm'?",
    ),
    "unknown limits key": (
        MINIMAL_GROUP + "[group.limits]\nmessage_size_max = 5\n",
        "group[0].limits.message_size_max",
        "allowed keys: dedupe_window_s, dlj_messages_max, dqf_messages_max, journal_bytes_max, "
        "message_bytes_max",
    ),
    "unknown link key": (
        MINIMAL_GROUP + SECOND_GROUP + "[[link]]\ngroups = [1, 2]\nadress = 'x:1'\n",
        "link[0].adress",
        "did you mean 'address'?",
    ),
    "no group": ("", "group", "at least one [[group]] is required"),
    "group is a table": (
        MINIMAL_GROUP.replace("[[group]]", "[group]"),
        "group",
        "must be an array of tables ([[group]]), got a table",
    ),
    "queue is a table": (
        MINIMAL_GROUP + "[group.queue]\nid = 1\n",
        "group[0].queue",
        "must be an array of tables ([[group.queue]])",
    ),
    "limits not a table": (
        MINIMAL_GROUP + "limits = 5\n",
        "group[0].limits",
        "must be a table",
    ),
    "missing name": (
        MINIMAL_GROUP.replace('name = "NYC"\n', ""),
        "group[0].name",
        "required key is missing",
    ),
    "missing listen": (
        MINIMAL_GROUP.replace('listen = "127.0.0.1:7001"\n', ""),
        "group[0].listen",
        "required key is missing",
    ),
    "missing queue id": (
        MINIMAL_GROUP + "[[group.queue]]\nname = 'A'\n",
        "group[0].queue[0].id",
        "required key is missing",
    ),
    "missing link groups": (
        MINIMAL_GROUP + "[[link]]\naddress = 'h:1'\n",
        "link[0].groups",
        "required key is missing",
    ),
    "id is a string": (
        MINIMAL_GROUP.replace("id = 1", 'id = "1"'),
        "group[0].id",
        "must be an integer, got string '1'",
    ),
    "id is a float": (
        MINIMAL_GROUP.replace("id = 1", "id = 1.0"),
        "group[0].id",
        "must be an integer, got float 1.0",
    ),
    "id is a bool": (
        MINIMAL_GROUP.replace("id = 1", "id = true"),
        "group[0].id",
        "must be an integer, got boolean true",
    ),
    "limit is a bool": (
        MINIMAL_GROUP + "[group.limits]\ndqf_messages_max = true\n",
        "group[0].limits.dqf_messages_max",
        "must be an integer, got boolean true",
    ),
    "messages_max is a bool": (
        _queue(messages_max="false"),
        "group[0].queue[0].messages_max",
        "must be an integer, got boolean false",
    ),
    "link group is a bool": (
        MINIMAL_GROUP + "[[link]]\ngroups = [true, 1]\n",
        "link[0].groups",
        "must be an array of two group ids, e.g. [1, 2], got [true, 1]",
    ),
    "pcj_default is an int": (
        MINIMAL_GROUP + "pcj_default = 1\n",
        "group[0].pcj_default",
        "must be true or false, got integer 1",
    ),
    "permanent is a string": (
        _queue(permanent='"yes"'),
        "group[0].queue[0].permanent",
        "must be true or false, got string 'yes'",
    ),
    "name is an int": (
        MINIMAL_GROUP.replace('name = "NYC"', "name = 5"),
        "group[0].name",
        "must be a string, got integer 5",
    ),
    "group id zero": (
        MINIMAL_GROUP.replace("id = 1", "id = 0"),
        "group[0].id",
        "must be in 1..32000, got 0",
    ),
    "group id too big": (
        MINIMAL_GROUP.replace("id = 1", "id = 32001"),
        "group[0].id",
        "must be in 1..32000, got 32001",
    ),
    "duplicate group id": (
        MINIMAL_GROUP + SECOND_GROUP.replace("id = 2", "id = 1"),
        "group[1].id",
        "duplicate group id 1 (also group[0])",
    ),
    "duplicate group name": (
        MINIMAL_GROUP + SECOND_GROUP.replace("LDN", "NYC"),
        "group[1].name",
        "duplicate group name 'NYC' (also group[0])",
    ),
    "empty group name": (
        MINIMAL_GROUP.replace('"NYC"', '""'),
        "group[0].name",
        "must be a name",
    ),
    "bad group name": (
        MINIMAL_GROUP.replace('"NYC"', '"New York"'),
        "group[0].name",
        "must be a name: a letter or '_' then letters, digits or '_', got 'New York'",
    ),
    "name starts with digit": (
        _queue(name='"1ST"'),
        "group[0].queue[0].name",
        "must be a name",
    ),
    "duplicate listen": (
        MINIMAL_GROUP + SECOND_GROUP.replace("7002", "7001"),
        "group[1].listen",
        "127.0.0.1:7001 is also the address of group[0].listen",
    ),
    "duplicate data_dir": (
        MINIMAL_GROUP + SECOND_GROUP.replace('"g2"', '"./g1"'),
        "group[1].data_dir",
        "is also the data_dir of group[0]",
    ),
    "empty data_dir": (
        MINIMAL_GROUP.replace('"g1"', '""'),
        "group[0].data_dir",
        "must not be empty",
    ),
    "listen without port": (
        MINIMAL_GROUP.replace("127.0.0.1:7001", "127.0.0.1"),
        "group[0].listen",
        "must be 'host:port', got '127.0.0.1'",
    ),
    "listen port too big": (
        MINIMAL_GROUP.replace("7001", "65536"),
        "group[0].listen",
        "port must be a number in 0..65535, got '65536'",
    ),
    "listen port not a number": (
        MINIMAL_GROUP.replace("7001", "http"),
        "group[0].listen",
        "port must be a number in 0..65535, got 'http'",
    ),
    "listen port negative": (
        MINIMAL_GROUP.replace("7001", "-1"),
        "group[0].listen",
        "port must be a number",
    ),
    "listen empty host": (
        MINIMAL_GROUP.replace("127.0.0.1:7001", ":7001"),
        "group[0].listen",
        "non-empty host",
    ),
    "listen bare ipv6": (
        MINIMAL_GROUP.replace("127.0.0.1:7001", "::1:7001"),
        "group[0].listen",
        "an IPv6 host must be in brackets",
    ),
    "limit zero": (
        MINIMAL_GROUP + "[group.limits]\nmessage_bytes_max = 0\n",
        "group[0].limits.message_bytes_max",
        "must be >= 1, got 0",
    ),
    "limit negative": (
        MINIMAL_GROUP + "[group.limits]\nsaf_messages_max = -5\n",
        "group[0].limits.saf_messages_max",
        "must be >= 1, got -5",
    ),
    "unconfirmed_max zero": (
        _queue(unconfirmed_max="0"),
        "group[0].queue[0].unconfirmed_max",
        "must be in 1..4294967295, got 0",
    ),
    "messages_max beyond a count": (
        _queue(messages_max="99999999999"),
        "group[0].queue[0].messages_max",
        "must be in 1..4294967295, got 99999999999",
    ),
    "queue id zero": (
        _queue(id="0"),
        "group[0].queue[0].id",
        "must be in 1..999, got 0",
    ),
    "queue id too big": (
        _queue(id="1000"),
        "group[0].queue[0].id",
        "must be in 1..999, got 1000",
    ),
    "declares queue 96": (
        _queue(id="96"),
        "group[0].queue[0].id",
        "queue 96 is the dead letter queue and is always present",
    ),
    "queue named DLQ": (
        _queue(name='"DLQ"'),
        "group[0].queue[0].name",
        "queue name 'DLQ' belongs to the dead letter queue",
    ),
    "duplicate queue id": (
        _queue() + "[[group.queue]]\nid = 10\nname = 'OTHER'\n",
        "group[0].queue[1].id",
        "duplicate queue id 10 in group 1 (also group[0].queue[0])",
    ),
    "duplicate queue name": (
        _queue() + "[[group.queue]]\nid = 11\nname = 'ORDERS'\n",
        "group[0].queue[1].name",
        "duplicate queue name 'ORDERS' in group 1 (also group[0].queue[0])",
    ),
    "bad confirm style": (
        _queue(confirm='"explicit"'),
        "group[0].queue[0].confirm",
        "must be one of 'implicit', 'explicit-in-order', 'explicit-out-of-order', got 'explicit'",
    ),
    "confirm not a string": (
        _queue(confirm="1"),
        "group[0].queue[0].confirm",
        "must be a string, got integer 1",
    ),
    "link to unknown group": (
        MINIMAL_GROUP + SECOND_GROUP + "[[link]]\ngroups = [1, 5]\n",
        "link[0].groups",
        "group 5 is not configured (groups: 1, 2)",
    ),
    "self link": (
        MINIMAL_GROUP + "[[link]]\ngroups = [1, 1]\n",
        "link[0].groups",
        "a link joins two different groups, got [1, 1]",
    ),
    "link with three groups": (
        MINIMAL_GROUP + SECOND_GROUP + "[[link]]\ngroups = [1, 2, 3]\n",
        "link[0].groups",
        "must be an array of two group ids, e.g. [1, 2], got [1, 2, 3]",
    ),
    "link groups a string": (
        MINIMAL_GROUP + SECOND_GROUP + "[[link]]\ngroups = '1,2'\n",
        "link[0].groups",
        "got string '1,2'",
    ),
    "duplicate link": (
        MINIMAL_GROUP + SECOND_GROUP + "[[link]]\ngroups = [1, 2]\n[[link]]\ngroups = [2, 1]\n",
        "link[1].groups",
        "duplicate link between groups 1 and 2 (also link[0])",
    ),
    "link address port zero": (
        MINIMAL_GROUP + SECOND_GROUP + "[[link]]\ngroups = [1, 2]\naddress = 'h:0'\n",
        "link[0].address",
        "port must be a number in 1..65535, got '0'",
    ),
    "link is a table": (
        MINIMAL_GROUP + "[link]\ngroups = [1, 2]\n",
        "link",
        "must be an array of tables ([[link]])",
    ),
    "toml syntax error": (
        MINIMAL_GROUP + "id = \n",
        "(syntax)",
        "Invalid value",
    ),
    "toml duplicate key": (
        MINIMAL_GROUP + "id = 2\n",
        "(syntax)",
        "Cannot overwrite a value (at line 6",
    ),
}


@pytest.mark.parametrize(
    ("text", "key", "problem"), list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS)
)
def test_bad_config(tmp_path: Path, text: str, key: str, problem: str) -> None:
    config_file = tmp_path / "bus.toml"
    config_file.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(config_file)
    err = caught.value
    message = str(err)
    assert "\n" not in message
    assert message.startswith(f"{config_file}: {key}: ")
    assert problem in message
    assert err.path == config_file
    assert err.key == key
    assert message == f"{config_file}: {err.key}: {err.problem}"


def test_syntax_error_names_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config('[[group]]\nid = 1\nname = "unterminated\n', tmp_path / "x.toml")
    assert caught.value.key == "(syntax)"
    assert "line 3" in caught.value.problem
    assert "\n" not in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value).startswith(f"{missing}: (file): cannot read")


def test_not_utf8(tmp_path: Path) -> None:
    config_file = tmp_path / "bus.toml"
    config_file.write_bytes(b"\xff\xfe[[group]]")
    with pytest.raises(ConfigError, match=r": \(file\): not UTF-8"):
        load_config(config_file)


def test_config_error_pickles(tmp_path: Path) -> None:
    err = ConfigError(tmp_path / "b.toml", "group[0].id", "must be\nan integer")
    assert err.problem == "must be an integer"
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)
    assert (copy.path, copy.key, copy.problem) == (err.path, err.key, err.problem)


def test_absolute_data_dir_and_home(tmp_path: Path) -> None:
    text = MINIMAL_GROUP.replace('"g1"', f'"{tmp_path / "abs"}"')
    bus = parse_config(text, Path("elsewhere/bus.toml"))
    assert bus.group(1).data_dir == (tmp_path / "abs").resolve()
    bus = parse_config(MINIMAL_GROUP.replace('"g1"', '"~/mrs-g1"'), tmp_path / "bus.toml")
    assert bus.group(1).data_dir == (Path.home() / "mrs-g1").resolve()


def test_numbers_too_long_to_read_name_their_key(tmp_path: Path) -> None:
    """int() refuses thousands of digits with a ValueError: the operator gets the key."""
    digits = "7" * 5000
    group = '[[group]]\nid = {id}\nname = "NYC"\nlisten = "127.0.0.1:{port}"\ndata_dir = "g"\n'
    with pytest.raises(ConfigError) as caught:
        parse_config(group.format(id=1, port=digits), tmp_path / "bus.toml")
    assert caught.value.key == "group[0].listen"
    assert "5000 characters" in caught.value.problem and len(str(caught.value)) < 200
    with pytest.raises(ConfigError) as caught:
        parse_config(group.format(id=digits, port=7001), tmp_path / "bus.toml")
    assert caught.value.key == "id" and "line 2" in caught.value.problem
    assert len(str(caught.value)) < 200
    assert parse_config(group.format(id=1, port="07001"), tmp_path / "b.toml").group(1)
