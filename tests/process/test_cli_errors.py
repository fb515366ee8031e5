"""Operator mistakes at the command line: one line on stderr, exit 2 (usage/config) or
1 (runtime), and a failed `mrs serve` start leaves the boot epoch untouched."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import mrs
from mrs.tools.cli import build_parser
from mrs.tools.cli_support import DefaultsHelpFormatter, subparsers_of
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config
from tests.disk_helpers import mounted_tmpfs

QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
"""


def _mrs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def _one_line(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    text = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stderr)
    assert text.count("\n") == 0, text
    assert "Traceback" not in text
    for word in words:
        assert word in text, (word, text)
    return text


def _config(tmp_path: Path, listen: str = "127.0.0.1:0", limits: str = "") -> Path:
    path = write_single_group_config(tmp_path, queues=QUEUES, limits=limits)
    if listen != "127.0.0.1:0":
        path.write_text(path.read_text().replace('"127.0.0.1:0"', f'"{listen}"'))
    return path


def _epoch(config: Path) -> int:
    process = GroupProcess(config, 1)
    address = process.start()
    try:
        status = json.loads(_mrs("status", "--address", address, "--json").stdout)
        return status["epoch"]
    finally:
        assert process.terminate() == 0


def test_version_matches_the_package() -> None:
    from importlib.metadata import version

    result = _mrs("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"mrs {mrs.__version__}"
    assert mrs.__version__ == version("mrs")


def test_every_option_of_every_subcommand_is_described_with_its_default() -> None:
    parser = build_parser()
    for sub in subparsers_of(parser):
        assert sub.formatter_class is DefaultsHelpFormatter
        text = sub.format_help()
        for action in sub._actions:
            if not action.option_strings or action.help == "==SUPPRESS==":
                continue
            assert action.help, f"{sub.prog} {action.option_strings[0]} has no help"
            default = action.default
            if default not in (None, False, "==SUPPRESS==") and not isinstance(default, bool):
                assert "default" in text, f"{sub.prog}: no default shown"
        assert "-v, --verbose" in text, sub.prog


def test_usage_mistakes_are_one_line_exit_2() -> None:
    _one_line(_mrs("serve"), 2, "mrs serve", "--config", "--help")
    _one_line(_mrs("nosuchcommand"), 2, "nosuchcommand")
    _one_line(_mrs("status", "--address", "localhost"), 2, "must be 'host:port'")


def test_verbose_is_accepted_after_the_subcommand(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _one_line(_mrs("serve", "--config", str(config), "--group", "7", "-v"), 2, "no group 7")


def test_status_of_a_group_that_is_down_is_one_line_exit_1() -> None:
    port = free_port()
    _one_line(_mrs("status", "--address", f"127.0.0.1:{port}"), 1, f"127.0.0.1:{port}", "running")


def test_port_in_use_is_one_line_exit_1_and_does_not_bump_the_epoch(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = _config(tmp_path, listen=f"127.0.0.1:{port}")
        result = _mrs("serve", "--config", str(config), "--group", "1")
        _one_line(result, 1, "listen", str(port), "in use", str(config))
    assert _epoch(config) == 1  # the failed start committed nothing


@pytest.mark.parametrize(
    "listen", ["192.0.2.1:0", "no-such-host.invalid:0"], ids=["foreign", "unresolvable"]
)
def test_a_host_that_is_not_this_machine_is_one_line_exit_2(tmp_path: Path, listen) -> None:
    config = _config(tmp_path, listen=listen)
    _one_line(_mrs("serve", "--config", str(config), "--group", "1"), 2, "listen", "local")
    assert not (tmp_path / "g1" / "journals").exists()


def test_a_data_dir_that_is_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    config = _config(tmp_path)
    (tmp_path / "g1").write_text("not a directory\n")
    _one_line(_mrs("serve", "--config", str(config), "--group", "1"), 2, "data_dir", "is a file")


@pytest.mark.parametrize(
    ("limits", "key"),
    [
        ("message_bytes_max = 5000000000", "message_bytes_max"),
        ("journal_bytes_max = 4096", "journal_bytes_max"),
        ("journal_bytes_max = 1152921504606846976", "journal_bytes_max"),
        ("dqf_messages_max = 99999999999", "dqf_messages_max"),
        ("journal_bytes_max = 2097152\nmessage_bytes_max = 2000000", "message_bytes_max"),
    ],
)
def test_numeric_keys_beyond_what_lmdb_and_the_protocol_allow(tmp_path: Path, limits, key) -> None:
    config = _config(tmp_path, limits=limits)
    _one_line(_mrs("serve", "--config", str(config), "--group", "1"), 2, key, "config error")


def test_read_only_journals_are_one_line_exit_1(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert _epoch(config) == 1
    data_file = tmp_path / "g1" / "journals" / "data.mdb"
    if os.geteuid() == 0:  # root writes through chmod: make the file immutable instead
        if subprocess.run(["chattr", "+i", str(data_file)], capture_output=True).returncode:
            pytest.skip("chattr +i is not supported on this filesystem")
    else:
        data_file.chmod(0o444)
    try:
        result = _mrs("serve", "--config", str(config), "--group", "1")
        _one_line(result, 1, str(data_file), "writable")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(data_file)], check=True)
        data_file.chmod(0o644)
    assert _epoch(config) == 2  # the refused start did not count


def test_full_disk_at_start_is_one_line_exit_1_and_does_not_bump_the_epoch(tmp_path) -> None:
    config = _config(tmp_path)
    assert _epoch(config) == 1
    fault = tmp_path / "fault"
    fault.write_text("ENOSPC")
    env = {"MRS_FAULT_FILE": str(fault)}
    result = _mrs("serve", "--config", str(config), "--group", "1", env=env)
    _one_line(result, 1, "no space left", "journal")
    assert _epoch(config) == 2


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 2 MiB filesystem (tmpfs), so a full disk is a real ENOSPC."""
    yield from mounted_tmpfs(tmp_path / "small-disk", "2m")


def test_a_really_full_disk_is_one_line_exit_1_and_does_not_bump_the_epoch(
    tmp_path: Path, small_disk: Path
) -> None:
    config = _config(tmp_path, limits="journal_bytes_max = 8388608\nmessage_bytes_max = 100000")
    config.write_text(
        config.read_text().replace('data_dir = "g1"', f'data_dir = "{small_disk}/g1"')
    )
    assert _epoch(config) == 1
    filler = small_disk / "filler"
    with open(filler, "wb") as out:  # fill every free block of the filesystem
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    result = _mrs("serve", "--config", str(config), "--group", "1")
    _one_line(result, 1, "no space left", str(small_disk))
    filler.unlink()
    assert _epoch(config) == 2


def test_a_map_larger_than_the_address_space_is_one_line_exit_2(tmp_path: Path) -> None:
    import resource

    config = _config(tmp_path, limits="journal_bytes_max = 4294967296")

    def limit_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    result = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_address_space,
    )
    _one_line(result, 2, "journal_bytes_max = 4294967296", "lower it")
    assert _epoch(config) == 1  # nothing was committed by the failed start


@pytest.mark.parametrize(
    "args",
    [
        ["dump", "--group", "1", "pcj"],
        ["dump", "--config", "nosuch.toml", "--group", "1", "pcj"],
        ["dump", "--config", "{config}", "--group", "1", "pcj", "--since", "yesterday"],
        ["sim", "run", "nosuch"],
        ["bench", "--seconds", "-1"],
        ["status", "--config", "nosuch.toml"],
        ["status", "--config", "{config}", "--group", "9"],
        ["web", "--config", "{config}", "--listen", "nope"],
        ["pcj", "archive", "--config", "{config}", "--group", "1", "--until", "someday"],
        ["serve", "--config", "{config}", "--group", "one"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_usage_mistakes_of_every_subcommand_are_one_line_exit_2(tmp_path: Path, args) -> None:
    config = _config(tmp_path)
    (tmp_path / "g1" / "journals").mkdir(parents=True)
    real = [a.replace("{config}", str(config)) for a in args]
    if real[0] == "dump" and "--since" in real:  # needs journals to exist first
        assert _epoch(config) == 1
    _one_line(_mrs(*real), 2)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["sim", "swarm", "--seeds", "0"], ["mrs sim swarm", "--seeds", ">= 1, got 0"]),
        (["demo", "--messages", "-5"], ["mrs demo", "--messages", ">= 1, got -5"]),
        (["sim", "replicated", "--seconds", "0"], ["mrs sim replicated", "> 0, got 0"]),
        (["sim", "run", "mixed", "--seconds", "nan"], ["mrs sim run", "> 0, got nan"]),
        (["failover", "--config", "b.toml", "G", "--wait", "-1"], ["mrs failover", "5..3600"]),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else None,
)
def test_a_count_or_length_that_would_check_nothing_is_refused(args, words) -> None:
    """Zero seeds, no messages or no seconds of faults would end in 'every invariant
    held' having checked nothing: refused before anything starts."""
    _one_line(_mrs(*args), 2, *words)


def test_a_demo_of_more_orders_than_it_can_keep_track_of_is_refused() -> None:
    """It kept every order's id and delivery in memory with no bound (ten million
    orders: gigabytes, hours): the bound is said, with the tool for a load."""
    _one_line(_mrs("demo", "--messages", "10000000"), 2, "mrs demo", "at most", "mrs bench")


def test_unrecognized_arguments_are_named_by_the_subcommand_given_them() -> None:
    """Its --help is the one that lists what it takes, not mrs's."""
    text = _one_line(_mrs("journal", "verify", "/tmp"), 2, "unrecognized arguments: /tmp")
    assert text.startswith("mrs journal verify: ") and "see mrs journal verify --help" in text
    text = _one_line(_mrs("sim", "swarm", "--seeds", "1", "--bogus"), 2, "--bogus")
    assert text.startswith("mrs sim swarm: ")
