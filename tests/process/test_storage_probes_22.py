"""Probes of storage at its edges (twenty-second round): real `mrs serve` processes and
the real offline tools against real LMDB files.

Each test names what a user would have seen before its fix.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clients import DeliveryMode, NoMoreMessages, Status, connect
from journals import JournalStore
from tests.cli_helpers import run_mrs
from tests.conftest import Bus


async def _put_and_confirm(address: str, bodies: list[bytes], confirmed: int) -> None:
    """Store `bodies` on ANYORDER (each STORED) and confirm the first `confirmed` of
    them (PCJ records, with pcj_default): a group with work both done and waiting."""
    async with connect(address, "SENDER") as sender, connect(address, "ANYORDER") as reader:
        for body in bodies:
            psb = await sender.put(body, target="ANYORDER", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED
        for _ in range(confirmed):
            message = await reader.get(timeout=5)
            await reader.confirm(message.seq)


async def _drain(address: str) -> list[bytes]:
    """Every message left on ANYORDER, each confirmed."""
    delivered: list[bytes] = []
    async with connect(address, "ANYORDER") as reader:
        while True:
            try:
                message = await reader.get(timeout=0)
            except NoMoreMessages:
                return delivered
            delivered.append(message.body)
            await reader.confirm(message.seq)


def _refused_in_one_line(result: subprocess.CompletedProcess, lock_file: Path) -> None:
    """Exit 1, one line naming the lock file and the way out, no traceback."""
    text = result.stderr.strip()
    assert result.returncode == 1, (result.returncode, result.stdout, text)
    assert text.count("\n") == 0 and "Traceback" not in text, text
    assert f"{lock_file} was deleted" in text and "Restart that process" in text, text


@pytest.mark.parametrize(
    "tool",
    [
        ("pcj", "archive", "--until", "now"),  # a guest writer beside the server
        ("journal", "verify"),  # a reader in a child process
        ("dump", "pcj"),  # a reader in this process
    ],
    ids=["pcj-archive", "journal-verify", "dump"],
)
async def test_a_lock_mdb_deleted_under_a_running_server_keeps_the_tools_off_it(
    tmp_path: Path, tool: tuple[str, ...]
) -> None:
    """Before: with journals/lock.mdb deleted under a running server (a clean-up of
    "stale" lock files), the next tool made a new, empty lock.mdb that the server never
    saw: `mrs pcj archive` committed beside the server's own commits unserialized and
    the server died of `Assertion 'pglast <= env->me_pglast' failed in
    mdb_freelist_save()` (a torn journal, acknowledged messages at risk), and a reader
    read pages the server was reusing. Now every tool refuses in one line and opens
    nothing; the server serves on, and after its restart the tools work again."""
    bus = Bus(tmp_path / "bus", group_extra="pcj_default = true")
    bus.start()
    bodies = [f"order {index}".encode() for index in range(30)]
    await _put_and_confirm(bus.address, bodies, confirmed=10)
    lock_file = bus.data_dir / "journals" / "lock.mdb"
    lock_file.unlink()
    where = ("--config", str(bus.config_path), "--group", "1")
    _refused_in_one_line(run_mrs(*tool, *where), lock_file)
    assert not lock_file.exists()  # nothing opened the journals beside the server
    more = [f"late {index}".encode() for index in range(5)]
    await _put_and_confirm(bus.address, more, confirmed=0)  # the server serves on
    bus.restart(graceful=True)
    again = run_mrs(*tool, *where)
    assert again.returncode == 0, again.stderr
    assert sorted(await _drain(bus.address)) == sorted(bodies[10:] + more)
    assert bus.process.terminate() == 0


OPEN_IN_A_CHILD = """
import sys
from journals import JournalError, JournalStore
try:
    JournalStore(sys.argv[1], **{sys.argv[2]: True}).close()
except JournalError as refused:
    sys.exit(str(refused))
"""


def _open_in_a_child(journals: Path, option: str) -> subprocess.CompletedProcess:
    """A JournalStore opened by another process, as a tool's would be."""
    command = [sys.executable, "-c", OPEN_IN_A_CHILD, str(journals), option]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_store_beside_an_owner_with_another_lock_mdb_is_refused(tmp_path: Path) -> None:
    """The library's own guard, where no server is involved (a client's SAF journal,
    the DLQ handler's journal source): a lock.mdb replaced since the owner opened it
    (here by a reader that made a new one) is not shared with the owner, so neither a
    guest writer nor a reader opens beside it. Once the owner closes, both open."""
    journals = tmp_path / "journals"
    owner = JournalStore(journals)
    try:
        (journals / "lock.mdb").unlink()
        (journals / "lock.mdb").write_bytes(b"")  # another process's fresh lock file
        for option in ("beside_owner", "readonly"):
            refused = _open_in_a_child(journals, option)
            assert refused.returncode == 1, refused.stderr
            assert "lock.mdb was replaced by another file" in refused.stderr
    finally:
        owner.close()
    for option in ("beside_owner", "readonly"):
        opened = _open_in_a_child(journals, option)
        assert opened.returncode == 0, opened.stderr
