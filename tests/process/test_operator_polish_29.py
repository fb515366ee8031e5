"""Small things an operator meets, each run as a real `mrs` process: a silent etcd
named as `mrs failover` names it, `--address` given with `--group`, a `--watch` out
of range, a queue argument that is no queue, and a credentials or password file that
is a named pipe or not text. Each is one line naming what is wrong, the exit status
for it (2 for usage, 1 at run time), no traceback, and nothing asked or blocked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mrs.config.bus import load_config
from sim.etcd import write_replicated_config
from sim.ports import free_port
from tests.auth_helpers import SecureBus
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.process.test_cli_mistakes_28b import _refused

BLOCKED_S = 30.0
"""How long a command may take before it counts as blocked (it ends in seconds)."""


def test_status_and_admin_name_a_silent_etcd_as_mrs_failover_does(tmp_path: Path) -> None:
    """Why: with no instance up and etcd down, `mrs status` and `mrs admin` showed the
    etcd client's words, "etcd does not answer either (etcd unreachable:
    http://...: cannot connect)", naming neither `[coordinator] etcd` nor the file;
    `mrs failover` and `mrs serve --instance` say where etcd was asked and what to
    check, and now these say it the same way."""
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = write_replicated_config(tmp_path, endpoint, STANDARD_QUEUES)
    check = (
        f"check that etcd is running there and that [coordinator] etcd in "
        f"{load_config(config).path} is its client URL"
    )
    silent = f"etcd at {endpoint} does not answer (cannot connect); "
    status = run_mrs("status", "--config", str(config), "--json", "--timeout", "3")
    assert status.returncode == 1, status.stderr
    (view,) = json.loads(status.stdout)["groups"]
    assert view["error"].endswith(
        f"{silent}no instance can become active until it does: {check}"
    ), view["error"]
    admin = run_mrs("admin", "connections", "--config", str(config))
    _refused(admin, 1, f"{silent}no instance can become active until it does: {check}")
    instance = load_config(config).groups[1].instances[0].listen
    alone = run_mrs("status", "--config", str(config), "--address", instance, "--timeout", "3")
    _refused(alone, 1, f"{silent}which instance is active is unknown: {check}")
    for text in (view["error"], admin.stderr, alone.stderr):
        assert "etcd unreachable" not in text


@pytest.mark.parametrize(
    "command", [("status",), ("admin", "purge", "ORDERS"), ("admin", "connections")]
)
def test_address_with_group_is_refused_before_anything_is_asked(command: tuple) -> None:
    """Why: `mrs admin purge ORDERS --address A --group 2` ignored --group and purged
    the queue of whatever group listened at A; `mrs status --address A --group 1`
    was refused "give --address (with --config to name it), or --group", which did
    not say what was wrong. Both now say why the two do not go together, exit 2,
    with nothing asked (nothing listens at the address)."""
    address = f"127.0.0.1:{free_port()}"
    result = run_mrs(*command, "--address", address, "--group", "1")
    text = _refused(result, 2, "give --address HOST:PORT or --group N, not both: --address")
    assert "--group picks a group of --config" in text and "cannot connect" not in text


@pytest.mark.parametrize("seconds", ["1e308", "1e-9", "nan", "inf", "0", "-1"])
def test_a_watch_out_of_its_range_is_a_usage_error_naming_the_range(seconds: str) -> None:
    """Why: `mrs status --watch 1e308` was taken: one refresh, then a sleep for good
    ("next in 1e+308 s"); `--watch 1e-9` asked every group in a busy loop."""
    address = f"127.0.0.1:{free_port()}"
    result = run_mrs("status", "--address", address, "--watch", seconds, "--times", "1")
    _refused(result, 2, f"argument --watch: must be a number of seconds 0.1..86400, got {seconds}")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("browse", "."), "queue '.' is a dot alone"),
        (("browse", ""), "queue '' is empty"),
        (("purge", ".ORDERS"), "queue '.ORDERS' has nothing before its dot (the group)"),
        (("browse", "NYC."), "queue 'NYC.' has nothing after its dot (the queue)"),
        (("set-limits", "1.10.2", "--messages-max", "5"), "queue '1.10.2' has more than one"),
        (("move", "ORDERS", "--to", "."), "--to '.' is a dot alone"),
    ],
)
def test_a_queue_argument_that_is_no_queue_says_what_is_wrong_with_it(
    tmp_path: Path, args: tuple, words: str
) -> None:
    """Why: `mrs admin browse .` was answered "no group named ''", `browse ''` "has
    several groups: say which with --group", and `browse NYC.` went to the group;
    none said what was wrong with the argument. Now it is exit 2, before anything is
    asked, with the forms a queue may take (with --config and with --address)."""
    config = tmp_path / "two.toml"
    config.write_text(
        "".join(
            f'[[group]]\nid = {g}\nname = "{name}"\nlisten = "127.0.0.1:{free_port()}"\n'
            f'data_dir = "g{g}"\n[[group.queue]]\nid = 10\nname = "ORDERS"\n'
            for g, name in ((1, "NYC"), (2, "LDN"))
        )
    )
    for where in (("--config", str(config)), ("--address", f"127.0.0.1:{free_port()}")):
        text = _refused(run_mrs("admin", *args, *where), 2, words)
        assert text.endswith("give a queue's name or id, G.Q or GROUP.NAME (e.g. ORDERS, "
                             "1.10, NYC.ORDERS)"), text  # fmt: skip
        assert "no group named" not in text and "cannot connect" not in text


def test_a_named_pipe_for_credentials_or_a_password_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    """Why: a credentials file, link secret or password file that is a named pipe
    with no writer blocked `mrs creds`, an operator's command reading
    MRS_AUTH_PASSWORD_FILE and `mrs serve` for good when they opened it. Now each is
    refused in one line before a byte is read (here a block is the run's timeout)."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1, 2))
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    fifo = f"{pipe} is a named pipe: only a regular file is read"
    listed = run_mrs("creds", "list", "--file", str(pipe), timeout_s=BLOCKED_S)
    _refused(listed, 2, f"credentials file {fifo}")
    env = {"MRS_AUTH_NAME": "ops", "MRS_AUTH_PASSWORD_FILE": str(pipe)}
    address = f"127.0.0.1:{free_port()}"
    status = run_mrs("status", "--address", address, env=env, timeout_s=BLOCKED_S)
    _refused(status, 2, f"password file {fifo}")
    secret = bus.directory / "secrets" / "group-1.secret"
    secret.unlink()
    os.mkfifo(secret)
    served = run_mrs(
        "serve", "--config", str(bus.config_path), "--group", "1", timeout_s=BLOCKED_S
    )
    _refused(served, 2, f"link secret file {secret} is a named pipe: only a regular file")


def test_a_refusal_hints_at_the_file_it_is_about(tmp_path: Path) -> None:
    """Why: every refusal of the bounded reader ended "is it the file `mrs creds`
    wrote?", also for an application's password file, which `mrs creds` never writes;
    now a password file's says what it should hold, and a link secret's names the
    command that writes it."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1, 2))
    password = tmp_path / "app.pw"
    password.write_bytes(b"\xff\xfe secret\n")
    added = run_mrs(
        "creds", "add", "app", "--file", str(tmp_path / "c.toml"),
        "--password-file", str(password),
    )  # fmt: skip
    text = _refused(
        added, 2, f"password file {password} is not UTF-8 text: it should hold the password "
        "alone, as text",
    )  # fmt: skip
    assert "mrs creds" not in text and not (tmp_path / "c.toml").exists()
    secret = bus.directory / "secrets" / "group-1.secret"
    secret.write_bytes(b"\xff\xfe" + secret.read_bytes())
    served = run_mrs("serve", "--config", str(bus.config_path), "--group", "1")
    _refused(
        served, 2, f"link secret file {secret} is not UTF-8 text: is it the one `mrs creds "
        "add-group` wrote?",
    )  # fmt: skip
