"""More operator mistakes, each run as a real `mrs` process: an empty path option, a
salvage of a file that holds nothing, a failover with etcd down, a data_dir under a
file, a credentials file that is no text or no end. Each is one line on stderr naming
what is wrong and what to check, the exit status for it, no traceback, and nothing
done that the mistake did not ask for."""

from __future__ import annotations

import pathlib
import subprocess
from pathlib import Path

import pytest

from mrs.tools.cli import build_parser
from mrs.tools.cli_support import subparsers_of
from sim.etcd import write_replicated_config
from sim.ports import free_port
from sim.processes import write_single_group_config
from tests.cli_helpers import run_mrs


def _refused(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The one line on stderr of a command that exited `code`, holding every word."""
    text = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    assert text and text.count("\n") == 0, text
    for word in words:
        assert word in text, (word, text)
    return text


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("serve", "--config", "", "--group", "1"), "--config"),
        (("serve", "--config", "{config}", "--group", "1", "--ready-file", ""), "--ready-file"),
        (("status", "--config", ""), "--config"),
        (("web", "--config", ""), "--config"),
        (("admin", "browse", "--config", ""), "--config"),
        (("failover", "--config", "", "NYC"), "--config"),
        (("certs", "--config", "{config}", "--out", ""), "--out"),
        (("keys", "new", "app", "--out", ""), "--out"),
        (("keys", "rotate", "app", "--out", ""), "--out"),
        (("creds", "list", "--file", ""), "--file"),
        (
            ("creds", "add", "app", "--file", "{tmp}/c.toml", "--password-file", ""),
            "--password-file",
        ),
        (("creds", "add-group", "2", "--file", "{tmp}/c.toml", "--secrets", ""), "--secrets"),
        (("dlq-handler", "", "--check"), "rules"),
        (("dlq-handler", "--config", "", "--group", "1"), "--config"),
        (("dump", "--data-dir", "", "pcj"), "--data-dir"),
        (("journal", "verify", "--config", "", "--group", "1"), "--config"),
    ],
)
def test_an_empty_path_option_is_refused_by_name(tmp_path: Path, args, option: str) -> None:
    """Why: an empty path (`--config "$CONFIG"`, the variable unset) was read as `.`:
    `--config ""` was answered "config error: .: (file): cannot read: Is a directory",
    a path nobody typed, and `mrs keys new --out ""` (or `mrs certs --out ""`) wrote
    a private key into whatever directory the command ran in."""
    config = write_single_group_config(tmp_path)
    here = tmp_path / "cwd"
    here.mkdir()
    given = [part.format(config=config, tmp=tmp_path) for part in args]
    result = run_mrs(*given, cwd=here)
    _refused(result, 2, f"argument {option}: empty: give a path")
    assert list(here.iterdir()) == []  # nothing written where the command ran


def test_no_path_option_of_any_subcommand_takes_a_plain_path() -> None:
    """The rule behind the one above, for every subcommand (bench, demo, sim and audit
    too, whose empty paths would run a whole bench or demo in the current directory):
    each path option uses the one shared type that refuses an empty path."""
    parser = build_parser()
    plain = [
        f"{sub.prog} {action.dest}"
        for sub in [parser, *subparsers_of(parser)]
        for action in sub._actions
        if isinstance(action.type, type) and issubclass(action.type, pathlib.PurePath)
    ]
    assert plain == []


@pytest.mark.parametrize("content", [b"", b"\x5a" * 65536], ids=["empty", "no-lmdb"])
def test_salvage_of_a_file_with_nothing_readable_fails(tmp_path: Path, content: bytes) -> None:
    """Why: salvage of a data.mdb that is no LMDB environment (random bytes, an empty
    file) made an empty environment at --to and ended "DAMAGED, copied 0", exit 0:
    the documented next steps (verify: intact; swap; serve) started the group on no
    messages."""
    journals = tmp_path / "g1" / "journals"
    journals.mkdir(parents=True)
    (journals / "data.mdb").write_bytes(content)
    rescued = tmp_path / "rescued"
    result = run_mrs("journal", "salvage", "--data-dir", str(tmp_path / "g1"), "--to", str(rescued))
    _refused(result, 1, "nothing to salvage", f"nothing was written to {rescued}")
    assert not rescued.exists()
    assert "DAMAGED" in result.stdout and "to " not in result.stdout  # the report, no copy


def test_failover_with_etcd_down_says_where_and_what_to_check(tmp_path: Path) -> None:
    """Why: it printed the HTTP client's own words, `etcd: etcd unreachable:
    http://...: ConnectError('all attempts to connect to 127.0.0.1:P failed')`,
    naming neither the config entry to check nor whether a failover was asked for."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    config = write_replicated_config(tmp_path, endpoint, "")
    text = _refused(
        run_mrs("failover", "--config", str(config), "NYC"),
        1,
        f"etcd at {endpoint} does not answer (cannot connect)",
        "no failover was asked for",
        "that etcd is running there",
        f"[coordinator] etcd in {config}",
    )
    assert "ConnectError" not in text and "unreachable" not in text


@pytest.mark.parametrize("instance", [None, "a"])
def test_a_data_dir_under_a_file_is_named(tmp_path: Path, instance: str | None) -> None:
    """Why: `mrs serve` read the data directory's group.json first, and answered
    ".../g1/group.json: cannot be read (Not a directory)": a file the operator never
    named, and no word of the data_dir key to fix. An instance of a replicated group
    (its own data_dir) is checked the same way, before etcd is asked."""
    (tmp_path / "afile").write_text("not a directory\n")
    if instance is None:
        config = write_single_group_config(tmp_path)
        config.write_text(config.read_text().replace('data_dir = "g1"', 'data_dir = "afile/g1"'))
        given = ("--group", "1")
        key = "group 1 (NYC) data_dir"
    else:
        config = write_replicated_config(tmp_path, f"http://127.0.0.1:{free_port()}", "")
        config.write_text(config.read_text().replace('data_dir = "a"', 'data_dir = "afile/a"'))
        given = ("--group", "1", "--instance", instance)
        key = f"group 1 (NYC) instance {instance} data_dir"
    result = run_mrs("serve", "--config", str(config), *given, timeout_s=30)
    data_dir = tmp_path / "afile" / (instance or "g1")
    text = _refused(
        result, 2, key, f"{data_dir} lies under {tmp_path / 'afile'}, a file, not a directory"
    )
    assert "group.json" not in text
    assert (tmp_path / "afile").read_text() == "not a directory\n"


def test_a_credentials_file_that_is_no_text_is_named(tmp_path: Path) -> None:
    """Why: a credentials file that is not UTF-8 (a binary file, the wrong one) was
    answered in Python's codec words, "not valid TOML: 'utf-8' codec can't decode
    byte 0xff in position 5", by `mrs creds` and by the server at start."""
    creds = tmp_path / "creds.toml"
    creds.write_bytes(b'x = "\xff\xfe"\n')
    creds.chmod(0o600)
    words = (f"credentials file {creds} is not UTF-8 text", "mrs creds")
    listed = _refused(run_mrs("creds", "list", "--file", str(creds)), 2, *words)
    config = write_single_group_config(tmp_path)
    config.write_text(
        '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n\n' + config.read_text()
    )
    served = _refused(run_mrs("serve", "--config", str(config), "--group", "1"), 2, *words)
    for text in (listed, served):
        assert "codec" not in text and "0xff" not in text


def test_a_credentials_file_with_no_end_is_refused(tmp_path: Path) -> None:
    """Why: the file was read whole with no bound: `mrs creds list --file /dev/zero`
    read until memory ran out (here: until the timeout killed it)."""
    result = run_mrs("creds", "list", "--file", "/dev/zero", timeout_s=60)
    _refused(result, 2, "credentials file /dev/zero is a character device: only a regular file")
    password = run_mrs(
        "creds", "add", "app", "--file", str(tmp_path / "c.toml"), "--password-file", "/dev/zero"
    )
    _refused(password, 2, "password file /dev/zero is a character device: only a regular file")
    assert not (tmp_path / "c.toml").exists()
    endless = tmp_path / "endless.toml"  # a regular file past the bound (sparse)
    with endless.open("wb") as file:
        file.truncate(17 << 20)
    result = run_mrs("creds", "list", "--file", str(endless), timeout_s=60)
    _refused(result, 2, f"credentials file {endless} is larger than 16 MiB")
