"""The journal tools on journals larger than their buffers: what each holds while it
reads, and what it keeps the server from. Each test says what was wrong before its fix."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from clients import MrsError, PutItem, connect
from journals import Journal, JournalStore
from mrs.tools.cli import main
from mrs.tools.journal.dump import FLUSH_CHARS
from mrs.tools.journal.pcj_archive import archive_pcj
from tests.journal_helpers import record, stopped_bus, write_records

DUMPED = 3000
"""PCJ records a paused dump holds open: its JSON is far more than a pipe's buffer."""
CHURN_BODY = b"c" * 32768
CHURN_BATCH = 16
CHURN_ROUNDS = 40  # 20 MiB put, taken and confirmed: five times the journal's cap
SMALL_JOURNAL = "journal_bytes_max = 4194304\nmessage_bytes_max = 65536"


async def test_a_dump_whose_output_waits_leaves_the_server_its_journal(replay_bus) -> None:
    """`mrs dump` read the whole journal in ONE read transaction, also while its output
    waited (`mrs dump pcj | less` left open): LMDB could reuse no page the server freed
    after it, so under load the group's journal filled in seconds and it refused puts
    and confirms ("journal map full") until the dump ended. Now it reads in pages, each
    in a transaction that ends before the page is printed."""
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(DUMPED)]}, limits=SMALL_JOURNAL)
    command = [sys.executable, "-m", "mrs", "dump", "--config", str(bus.config_path)]
    dump = subprocess.Popen(
        [*command, "--group", "1", "pcj", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        first = dump.stdout.readline()  # it runs; then the pipe, unread, stops it
        async with connect(bus.address, queue="ANYORDER") as client:
            for _ in range(CHURN_ROUNDS):
                items = [PutItem(body=CHURN_BODY, target="ANYORDER")] * CHURN_BATCH
                refused = [r for r in await client.put_many(items) if isinstance(r, MrsError)]
                assert not refused, refused[0]
                for message in await client.get_many(CHURN_BATCH, timeout=10):
                    await client.confirm(message.seq)
        rest = dump.stdout.read()  # through the buffer readline filled
        stderr = dump.stderr.read()
        dump.wait(timeout=60)
    finally:
        if dump.poll() is None:
            dump.kill()
            dump.communicate()
    assert dump.returncode == 0, stderr
    assert len((first + rest).splitlines()) == DUMPED


def test_a_dump_of_large_bodies_is_written_as_it_reads(tmp_path: Path, monkeypatch) -> None:
    """`mrs dump --body-full --json` wrote every 2,000 lines, whatever their size: a
    1 MiB body is a 2 MiB line, and 400 such records held 2.4 GB of the dump's memory
    before its first write. Now it writes once FLUSH_CHARS of text waits."""
    bus = stopped_bus(tmp_path / "bus")
    body = b"\xff" * (256 << 10)  # not text: written as hex, 512 KiB a line
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(i, body=body) for i in range(24)])
    writes: list[int] = []

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(len(text))
            return len(text)

    monkeypatch.setattr(sys, "stdout", Out())
    assert main(["dump", "--data-dir", str(bus.data_dir), "pcj", "--json", "--body-full"]) == 0
    assert sum(writes) > 2 * FLUSH_CHARS
    assert max(writes) <= FLUSH_CHARS + (1 << 20), writes  # one line past the bound at most


def test_a_pcj_archive_chunk_is_bounded_by_bytes(tmp_path: Path) -> None:
    """`mrs pcj archive` read, decoded and wrote 5,000 records at a time whatever
    their size: 400 records of 1 MiB took 1.45 GB of its memory (a chunk of 1 MiB
    bodies, about 18 GB). Now a chunk also ends at `chunk_bytes`, and a chunk that
    ends short on bytes does not end the run: every record is archived once."""
    bus = stopped_bus(tmp_path / "bus")
    journals = bus.data_dir / "journals"
    records = [record(i, body=bytes(64 << 10)) for i in range(10)]
    write_records(journals, Journal.PCJ, records)
    store = JournalStore(journals)
    try:
        result = archive_pcj(store, 1, tmp_path / "archive", 1 << 62, chunk_bytes=200 << 10)
        left = store.count(Journal.PCJ)
    finally:
        store.close()
    assert (result.archived, left) == (10, 0)
    assert len(result.files) == 4  # chunks of 3, 3, 3 and 1 records (none past 200 KiB)


def test_a_jplay_plan_chunk_is_bounded_by_bytes(tmp_path: Path, monkeypatch, capsys) -> None:
    """jplay read 1,024 records at a time into its plan whatever their size: 400
    records of 1 MiB took 448 MB of its memory (a chunk of them, over 1 GB). Now a
    chunk also ends at PLAN_CHUNK_BYTES of bodies, and a short chunk does not end
    the plan: every record is still selected."""
    from mrs.tools.journal import replay

    bus = stopped_bus(tmp_path / "bus")
    body = bytes(64 << 10)
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(i, body=body) for i in range(10)])
    monkeypatch.setattr(replay, "PLAN_CHUNK_BYTES", 100 << 10)
    pages: list[int] = []
    read_page = replay.read_page

    def counted(*args, **kwargs):
        page, ended = read_page(*args, **kwargs)
        pages.append(sum(len(item.body) for _key, item in page))
        return page, ended

    monkeypatch.setattr(replay, "read_page", counted)
    arguments = ["jplay", "--data-dir", str(bus.data_dir), "--group", "1", "pcj"]
    assert main([*arguments, "--to", "1.21", "--dry-run", "--json"]) == 0
    assert '"would_send": 10' in capsys.readouterr().out
    assert max(pages) <= (100 << 10) + len(body), pages
