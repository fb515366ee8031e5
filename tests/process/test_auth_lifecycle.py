"""Credentials over time and on disk, against real `mrs serve` processes: rotation and
removal without a restart (file change, SIGHUP), a wrong link credential refused
before any transfer (either side), owner-only files whatever the umask."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, NotAuthorized, Uma, connect
from mrs.security.creds import load
from sim.processes import GroupProcess, ServerStartError
from tests.auth_helpers import SecureBus, creds, mrs, password_of

WAIT_S = 20.0


async def wait_for_log(path, text: str) -> None:
    """Another process's log: there is no event to await, so poll it briefly."""
    with trio.fail_after(WAIT_S):
        while text not in path.read_text(errors="replace"):
            await trio.sleep(0.05)


@pytest.fixture
def single(tmp_path):
    bus = SecureBus(tmp_path / "single", group_ids=(1,))
    bus.start()
    yield bus
    bus.stop()


async def test_rotation_and_removal_take_effect_without_a_restart(single, tmp_path) -> None:
    address, pid = single.address(1), single.processes[1].process.pid
    config = str(single.config_path)
    async with connect(address, "1.10", credentials=creds("consumer")) as live:
        with pytest.raises(NoMoreMessages):
            await live.get(timeout=0)  # allowed (and the server remembers the answer)
        new_password = tmp_path / "new.pw"
        new_password.write_text("a new password")
        mrs("creds", "rotate", "consumer", "--config", config,
            "--password-file", str(new_password), "--iterations", "1000")  # fmt: skip
        with pytest.raises(NotAuthorized):
            async with connect(address, "1.10", credentials=creds("consumer"), reconnect=None):
                pass
        async with connect(address, None, credentials=creds("consumer", "a new password")):
            pass
        # Grants are read at each request: the live session loses get with its grant.
        mrs("creds", "grant", "consumer", "--config", config, "--confirm", "1.10")
        async with connect(address, None, credentials=creds("ops")):
            pass  # a new connection makes the server look at the file
        with pytest.raises(NotAuthorized, match="get from 1.10 is not granted"):
            await live.get(timeout=0)
        mrs("creds", "remove", "consumer", "--config", config)
        async with connect(address, None, credentials=creds("ops")):
            pass
        with pytest.raises(NotAuthorized):
            await live.confirm(1)
    assert single.processes[1].process.pid == pid and single.processes[1].running
    assert "consumer" not in load(single.directory / "creds.toml").principals


async def test_sighup_reloads_and_a_broken_file_keeps_the_old_credentials(single) -> None:
    process = single.processes[1].process
    log_path = single.directory / "group1.log"
    process.send_signal(signal.SIGHUP)
    await wait_for_log(log_path, "credentials reloaded (SIGHUP)")
    (single.directory / "creds.toml").write_text("this is [not toml")
    process.send_signal(signal.SIGHUP)
    await wait_for_log(log_path, "credentials not reloaded (SIGHUP)")
    async with connect(single.address(1), "1.10", credentials=creds("consumer")) as client:
        with pytest.raises(NoMoreMessages):
            await client.get(timeout=0)
    assert single.processes[1].running


@pytest.mark.parametrize("wrong_side", [2, 1])
async def test_a_wrong_link_credential_is_refused_before_any_transfer(tmp_path, wrong_side):
    """Each group reads its own copy of the credentials file; in one copy the other
    group's link verifier is stale (rotated elsewhere). wrong_side=2: group 2 cannot
    check group 1's proof, so it refuses the dialer; wrong_side=1: group 1 cannot
    check group 2's proof back, so the dialer gives up. Either way no transfer."""
    bus = SecureBus(tmp_path / "bus")
    other = 1 if wrong_side == 2 else 2
    stale = bus.directory / "creds-stale.toml"
    shutil.copy(bus.directory / "creds.toml", stale)
    mrs("creds", "add-group", str(other), "--file", str(stale), "--secrets",
        str(bus.directory / "unused-secrets"), "--rotate", "--iterations", "1000")  # fmt: skip
    config = bus.write_config(f"bus-g{wrong_side}.toml", "creds-stale.toml")
    bus.processes[wrong_side] = GroupProcess(config, wrong_side)
    bus.start()
    try:
        if wrong_side == 2:
            expected = (2, "authentication failed for 'group:1'")
        else:
            expected = (1, "cannot prove it is group 2")
        await wait_for_log(bus.directory / f"group{expected[0]}.log", expected[1])
        async with connect(bus.address(1), "1.13", credentials=creds("producer")) as producer:
            await producer.put(b"held", target="2.10", delivery=DeliveryMode.WF_DQF,
                               uma=Uma.SAF, timeout=10)  # fmt: skip
        async with connect(bus.address(1), None, credentials=creds("ops")) as ops:
            link = (await ops.status())["links"]["2"]
        assert (link["state"], link["saf_backlog"]) == ("down", 1)
        async with connect(bus.address(2), "2.10", credentials=creds("consumer2")) as receiver:
            with pytest.raises(NoMoreMessages):
                await receiver.get(timeout=0)
        assert "link to group 1 up" not in (bus.directory / "group2.log").read_text()
    finally:
        bus.stop()


def test_files_are_owner_only_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        bus = SecureBus(tmp_path / "open", group_ids=(1,))
        bus.start()
        bus.stop()
    finally:
        os.umask(old)
    data_dir = bus.directory / "g1"
    expected = {
        data_dir: 0o700,
        data_dir / "journals": 0o700,
        data_dir / "journals" / "data.mdb": 0o600,
        data_dir / "journals" / "lock.mdb": 0o600,
        bus.directory / "creds.toml": 0o600,
        bus.directory / "secrets": 0o700,
        bus.directory / "secrets" / "group-1.secret": 0o600,
    }
    modes = {path: stat.S_IMODE(os.stat(path).st_mode) for path in expected}
    assert modes == expected
    for path in data_dir.iterdir():
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path


def test_an_old_journal_left_world_readable_is_narrowed(tmp_path) -> None:
    from journals import JournalStore

    path = tmp_path / "journal"
    JournalStore(path, 1 << 20).close()
    os.chmod(path / "data.mdb", 0o644)
    os.chmod(path, 0o755)
    JournalStore(path, 1 << 20).close()
    assert stat.S_IMODE(os.stat(path / "data.mdb").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700


async def test_jplay_through_the_server_honours_the_replay_right(single) -> None:
    """`mrs jplay` reads the PCJ locally but puts through the server: with credentials
    that lack the replay right nothing is replayed; with them the message is back."""
    address = single.address(1)
    async with connect(address, "1.13", credentials=creds("producer")) as producer:
        await producer.put(b"audited", target="1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
    async with connect(address, "1.10", credentials=creds("consumer")) as consumer:
        message = await consumer.get(timeout=10)
        await consumer.confirm(message.seq)  # pcj_default: into the PCJ

    def jplay(name: str) -> subprocess.CompletedProcess:
        argv = ["jplay", "pcj", "--config", str(single.config_path), "--group", "1"]
        return subprocess.run(
            [sys.executable, "-m", "mrs", *argv, "--as", "1.13", "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, "MRS_AUTH_NAME": name, "MRS_AUTH_PASSWORD": password_of(name)},
            timeout=120,
        )

    denied = await trio.to_thread.run_sync(jplay, "producer")
    assert denied.returncode != 0 and "NOTAUTHORIZED" in denied.stdout + denied.stderr
    # a re-run cannot help before the grant: the summary says so, not "run it again"
    assert json.loads(denied.stdout)["resumable"] is False
    async with connect(address, "1.10", credentials=creds("consumer")) as consumer:
        with pytest.raises(NoMoreMessages):
            await consumer.get(timeout=0)
    allowed = await trio.to_thread.run_sync(jplay, "replayer")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    async with connect(address, "1.10", credentials=creds("consumer")) as consumer:
        again = await consumer.get(timeout=10)
        assert again.body == b"audited"


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("creds", "not valid TOML"),
        ("secret", "does not match principal 'group:1'"),
    ],
)
def test_serve_with_unusable_credentials_stops_with_one_line(tmp_path, damage, said) -> None:
    bus = SecureBus(tmp_path / "bad")
    if damage == "creds":
        (bus.directory / "creds.toml").write_text("[principal\n")
    else:
        (bus.directory / "secrets" / "group-1.secret").write_text("not the secret\n")
    with pytest.raises(ServerStartError):
        bus.processes[1].start()
    log = bus.log(1)
    assert said in log and "Traceback" not in log
