"""The journals' edges an operator meets (thirty-first session, second pass): what a
full journal map says to the client whose confirm it refused, and what `mrs dump
--client-saf` says when given a file. Real `mrs serve` processes, real journals.

Each test names what a user saw before its fix.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clients import DeliveryMode, MrsError, connect, connect_sync
from tests.conftest import Bus


async def test_a_confirm_the_full_map_refuses_says_what_to_do_in_mrs_words(
    make_bus, tmp_path: Path
) -> None:
    """Before: a confirm (or a put) whose commit found the journal map full was
    answered MRS_RES_EXH with py-lmdb's words, "journal map full: mdb_put:
    MDB_MAP_FULL: Environment mapsize limit reached (Please use a larger
    Environment(map_size=) parameter)", an option no operator has. Now it names the
    journal, its map and the ways out (journal_bytes_max, `mrs pcj archive`). The
    fault file makes LMDB's own MapFullError at the commit, where a full map raises
    it; the message stays on the queue."""
    fault = tmp_path / "fault"
    fault.write_text("")
    bus: Bus = make_bus(group_extra="pcj_default = true", env={"MRS_FAULT_FILE": str(fault)})
    async with connect(bus.address, "SENDER") as sender:
        await sender.put(b"kept", "ANYORDER", delivery=DeliveryMode.WF_DQF)
    async with connect(bus.address, "ANYORDER") as reader:
        message = await reader.get(timeout=5)
        fault.write_text("MAPFULL")
        try:
            await reader.confirm(message.seq)
        except MrsError as error:
            refused = str(error)
        else:
            raise AssertionError("the confirm was taken with the map full")
        fault.write_text("")
    assert "MRS_RES_EXH" in refused, refused
    assert "map_size=" not in refused and "Environment" not in refused, refused
    assert "journal map full" in refused and str(bus.data_dir / "journals") in refused
    assert "journal_bytes_max" in refused and "mrs pcj archive" in refused, refused
    async with connect(bus.address, "ANYORDER") as reader:  # still there, and it drains
        again = await reader.get(timeout=5)
        await reader.confirm(again.seq)
    assert again.body == b"kept"


def _dump_client_saf(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", "dump", "--client-saf", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dump_given_a_client_journals_file_says_which_directory_to_give(bus: Bus, tmp_path) -> None:
    """Before: `mrs dump --client-saf DIR/data.mdb` said "no client SAF journal in
    DIR/data.mdb (no data.mdb)", which read as if the journal were missing. Now it
    says a directory is wanted, and which one; given it, the dump reads the record."""
    journal = tmp_path / "app-saf"
    with connect_sync(bus.address, "SENDER", saf_journal=journal, connect_timeout_s=1) as client:
        client.put(b"queued", target="1.10", delivery=DeliveryMode.WF_DQF)
    refused = _dump_client_saf(journal / "data.mdb")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "(no data.mdb)" not in refused.stderr
    assert f"--client-saf {journal}" in refused.stderr and "saf_journal=DIR" in refused.stderr
    other = tmp_path / "notes.txt"
    other.write_text("not a journal")
    assert "is a file, not a client SAF journal" in _dump_client_saf(other).stderr
    assert _dump_client_saf(journal).returncode == 0
