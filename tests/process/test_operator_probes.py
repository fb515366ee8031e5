"""Operator commands on a two-group bus (NYC group 1, LDN group 2), as a probe found
them: what each command does with a mistake the operator can fix (one line, exit 2
for usage, 1 for an operational failure, never a traceback), and that each does
what its --help and the docs say. Real `mrs` processes throughout."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import BadParameter, DeliveryMode, connect
from mrs.ops.admin_actions import JOURNAL_FILE_NAME
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs

pytestmark = pytest.mark.xdist_group("operator_probes")


def _two_groups(directory: Path, ops: str = "") -> Path:
    """NYC (1): ORDERS, MEMQ (memory only), REPLAY; LDN (2): REPLAY, AUDIT. `ops` is
    group 1's [group.ops] body, with {listen} for its own listen address."""
    directory.mkdir(parents=True, exist_ok=True)
    nyc, ldn = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    group_ops = f"[group.ops]\n{ops.format(listen=nyc)}\n" if ops else ""
    text = f"""
[[group]]
id = 1
name = "NYC"
listen = "{nyc}"
data_dir = "g1"
{group_ops}
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 11
name = "MEMQ"
recoverable = false
[[group.queue]]
id = 16
name = "REPLAY"

[[group]]
id = 2
name = "LDN"
listen = "{ldn}"
data_dir = "g2"
[[group.queue]]
id = 16
name = "REPLAY"
[[group.queue]]
id = 20
name = "AUDIT"

[[link]]
groups = [1, 2]
"""
    path = directory / "bus.toml"
    path.write_text(text)
    return path


@pytest.fixture
def two_groups(tmp_path: Path) -> Iterator[Path]:
    """The two-group bus, both groups running."""
    config = _two_groups(tmp_path / "bus")
    processes = [GroupProcess(config, 1), GroupProcess(config, 2)]
    for process in processes:
        process.start()
    yield config
    for process in processes:
        process.terminate()


def _one_line(result, code: int, *words: str) -> str:
    """The command failed with exit `code` and exactly one line on stderr holding `words`."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


# ------------------------------------------------------- [group.ops] endpoint addresses
@pytest.mark.parametrize(
    "ops, keys",
    [
        ('metrics_listen = "{listen}"', ("group[0].ops.metrics_listen", "group[0].listen")),
        ('web_listen = "{listen}"', ("group[0].ops.web_listen", "group[0].listen")),
        (
            'metrics_listen = "127.0.0.1:{port}"\nweb_listen = "127.0.0.1:{port}"',
            ("group[0].ops.web_listen", "group[0].ops.metrics_listen"),
        ),
        (
            'metrics_listen = "0.0.0.0:{port}"\nweb_listen = "127.0.0.1:{port}"',
            ("group[0].ops.web_listen", "group[0].ops.metrics_listen"),
        ),
    ],
)
def test_an_ops_endpoint_on_a_port_the_group_uses_is_refused_at_load(
    tmp_path: Path, ops: str, keys: tuple[str, str]
) -> None:
    config = _two_groups(tmp_path, ops.replace("{port}", str(free_port())))
    result = run_mrs("serve", "--config", str(config), "--group", "1")
    assert result.stdout == ""  # refused before READY
    line = _one_line(result, 2, "config error", *keys)
    assert line.index(keys[0]) < line.index(keys[1])


@pytest.mark.parametrize("key", ["metrics_listen", "web_listen"])
def test_an_ops_endpoint_whose_port_is_taken_fails_in_one_line_naming_it(
    tmp_path: Path, key: str
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = _two_groups(tmp_path, f'{key} = "127.0.0.1:{port}"')
        result = run_mrs("serve", "--config", str(config), "--group", "1")
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr
    assert "READY" not in result.stdout  # the start fails: no client is told it is up
    assert last == (
        f"mrs: {config}: group 1 (NYC) ops.{key} = 127.0.0.1:{port}: the port is in use "
        f"by another process; stop it or change {key}"
    )


# ---------------------------------------------------------- mrs admin: which group
async def _put(address: str, queue: str, body: bytes) -> None:
    async with connect(address, "ORDERS") as client:
        await client.put(body, queue, delivery=DeliveryMode.WF_DQF)


def _admin(config: Path, *argv: str):
    return run_mrs("admin", *argv, "--config", str(config))


def test_admin_finds_the_group_a_queue_names_and_refuses_an_ambiguous_one(two_groups) -> None:
    config = two_groups
    for queue, shown in (("NYC.ORDERS", "1.10"), ("LDN.AUDIT", "2.20"), ("AUDIT", "2.20")):
        browsed = _admin(config, "browse", queue, "--json")
        assert browsed.returncode == 0, browsed.stderr
        assert json.loads(browsed.stdout)["queue"] == shown
    nyc = json.loads(_admin(config, "browse", "NYC.REPLAY", "--json").stdout)
    trio.run(_put, _address_of(config, 1), "REPLAY", b"keep me")
    for action in ("browse", "purge"):
        _one_line(
            _admin(config, action, "REPLAY"),
            2,
            "'REPLAY' is in groups 1 (NYC) and 2 (LDN)",
            "NYC.REPLAY",
            "--group 1",
        )
    after = json.loads(_admin(config, "browse", "NYC.REPLAY", "--json").stdout)
    assert (nyc["waiting"], after["waiting"]) == (0, 1)  # the refused purge took nothing
    _one_line(_admin(config, "browse", "NOPE"), 1, "no queue 'NOPE' in any group")
    _one_line(_admin(config, "browse", "9.10"), 2, "no group 9 in", "(groups: 1, 2)")
    _one_line(_admin(config, "browse", "PAR.ORDERS"), 2, "no group named 'PAR'")
    _one_line(_admin(config, "connections"), 2, "several groups", "--group")


def _address_of(config: Path, group_id: int) -> str:
    from mrs.config.bus import load_config

    return load_config(config).groups[group_id].client_address


# ------------------------------------------------- the admin journal keeps refusals
def test_every_refused_admin_action_is_in_the_admin_journal(two_groups) -> None:
    config = two_groups
    address = _address_of(config, 1)
    asks = (
        (("move", "ORDERS", "--to", "NOPE"), "move", "no queue 'NOPE'"),
        (("move", "ORDERS", "--to", "ORDERS"), "move", "the target is the source"),
        (("move", "ORDERS", "--to", "MEMQ"), "move", "has no DQF"),
        (("purge", "NOPE"), "purge", "no queue 'NOPE'"),
        (("browse", "1.999"), "browse", "no queue 1.999 in group 1"),
    )
    for argv, _, words in asks:
        _one_line(run_mrs("admin", *argv, "--address", address), 1, words)
    lines = (config.parent / "g1" / JOURNAL_FILE_NAME).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["action"], "refused" in r["result"]) for r in records] == [
        (action, True) for _, action, _ in asks
    ]
    assert (
        records[0]["args"]["to"] == "NOPE" and "no queue 'NOPE'" in records[0]["result"]["refused"]
    )
    assert records[2]["result"]["status"] == "NO_DQF"
    journal = run_mrs("admin", "journal", "--address", address, "--json")
    assert len(json.loads(journal.stdout)["records"]) == len(asks)


def test_an_admin_argument_it_does_not_read_is_refused_by_name_and_nothing_is_purged(
    two_groups,
) -> None:
    """The web console and the client API send admin args as a table: a misspelt
    `discard` or `limit` was silently dropped, and `discard: "no"` counted as yes."""
    address = _address_of(two_groups, 1)

    async def asks() -> list[str]:
        refusals = []
        async with connect(address, "ORDERS") as client:
            await client.put(b"keep me", "ORDERS", delivery=DeliveryMode.WF_DQF)
            for action, args in (
                ("purge", {"queue": "ORDERS", "dicsard": True}),
                ("purge", {"queue": "ORDERS", "discard": "no"}),
                ("browse", {"queue": "ORDERS", "limt": 5}),
                ("connections", {"verbose": True}),
            ):
                with pytest.raises(BadParameter) as refused:
                    await client.admin(action, **args)
                refusals.append(str(refused.value))
            assert (await client.pending(["ORDERS"]))[0] == 1
            assert (await client.get(timeout=5)).body == b"keep me"
        return refusals

    refusals = trio.run(asks)
    assert "unknown argument ['dicsard']" in refusals[0] and "discard" in refusals[0]
    assert "discard must be true or false, got 'no'" in refusals[1]
    assert "unknown argument ['limt']" in refusals[2]
    assert "connections: unknown argument ['verbose'] (known: none)" in refusals[3]
    lines = (two_groups.parent / "g1" / JOURNAL_FILE_NAME).read_text().splitlines()
    assert [json.loads(line)["action"] for line in lines] == [
        "purge",
        "purge",
        "browse",
        "connections",
    ]


@pytest.mark.parametrize("command", [("status", "--json"), ("admin", "connections", "--json")])
def test_a_reader_that_went_away_ends_the_command_quietly(two_groups, command) -> None:
    """`mrs status | head`: when the reader had closed the pipe before the command
    wrote, it said "mrs: Broken pipe" and exited 1 (or Python complained at exit)."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "mrs", *command, "--address", _address_of(two_groups, 1)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before anything is written
    errors = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0, errors
    assert errors == ""


# ------------------------------------------------ mrs dlq-handler --check is the run
@pytest.mark.parametrize(
    "control, words",
    [
        (
            "INPUTQ(FOO) WAIT(NO)",
            "INPUTQ(FOO): a handler works the group's DLQ (DLQ, 96) or its DLJ",
        ),
        ("INPUTQM(LDN) WAIT(NO)", "INPUTQM(LDN) is not group 1 (NYC) of --group"),
    ],
)
def test_check_refuses_the_control_data_the_handler_refuses(
    tmp_path: Path, control: str, words: str
) -> None:
    config = _two_groups(tmp_path / "bus")
    rules = tmp_path / "t.rules"
    rules.write_text(f"{control}\nACTION(IGNORE)\n")
    where = ("--config", str(config), "--group", "1", "--address", f"127.0.0.1:{free_port()}")
    for mode in ("--check", "--once"):
        result = run_mrs("dlq-handler", str(rules), *where, mode)
        assert result.returncode == 2, (mode, result.stdout, result.stderr)
        assert result.stderr.splitlines() == [f"mrs dlq-handler: {words}"], mode


def test_check_reports_syntax_and_bus_errors_together(tmp_path: Path) -> None:
    config = _two_groups(tmp_path / "bus")
    rules = tmp_path / "t.rules"
    rules.write_text("ACTION(FWD) FWDQ(ARCHVE)\nACTION(PERHAPS)\nACTION(FWD) FWDQ(LDN.NOSUCH)\n")
    result = run_mrs("dlq-handler", str(rules), "--config", str(config), "--group", "1", "--check")
    assert result.returncode == 2, result.stderr
    places = [line.split(": ", 2)[2] for line in result.stderr.splitlines()[:-1]]
    expected = (
        "line 1, column 13: FWDQ(ARCHVE) names no queue",
        "line 2, column 1: ACTION(PERHAPS)",
        "line 3, column 13: FWDQ(LDN.NOSUCH) names no queue",
    )
    assert len(places) == len(expected), result.stderr
    for place, start in zip(places, expected, strict=True):
        assert place.startswith(start), result.stderr
    assert result.stderr.splitlines()[-1] == (
        "mrs dlq-handler: 3 error(s) in the rules table; not started"
    )


def test_check_refuses_a_window_the_handler_refuses(tmp_path: Path) -> None:
    rules = tmp_path / "t.rules"
    rules.write_text("ACTION(IGNORE)\n")
    for option, said in (("--window", "--window must be from 1 to"),
                         ("--seen-max", "--seen-max must be at least 1, not 0")):  # fmt: skip
        result = run_mrs("dlq-handler", str(rules), "--check", option, "0")
        _one_line(result, 2, said)


# ------------------------------------------------------------ mrs status --timeout
@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_status_timeout_must_be_above_zero(tmp_path: Path, value: str) -> None:
    config = _two_groups(tmp_path / "bus")
    result = run_mrs("status", "--config", str(config), f"--timeout={value}")
    assert result.stdout == ""
    _one_line(result, 2, "--timeout", "must be a number of seconds 0.01..600")


# ------------------------------------------------- mrs creds: no such principal
def test_creds_rotate_grant_and_remove_agree_on_a_principal_not_in_the_file(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "creds.toml")
    made = run_mrs("creds", "add", "app", "--file", path, "--generate", "--iterations", "4096")
    assert made.returncode == 0, made.stderr
    for argv in (
        ("rotate", "nobody", "--generate"),
        ("grant", "nobody", "--attach", "1.10"),
        ("remove", "nobody"),
    ):
        result = run_mrs("creds", *argv, "--file", path)
        assert result.stdout == "", argv
        _one_line(result, 2, f"no principal 'nobody' in {path}: add it first")
