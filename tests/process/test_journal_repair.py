"""A damaged journal never kills the server (it refuses to start with one line naming
the file), and `mrs journal verify` / `mrs journal salvage` report the damage and copy
out every intact record. Real `mrs serve` processes and real, really damaged files."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

from clients import DeliveryMode, NoMoreMessages, Uma, connect
from journals import Journal, JournalStore, Record, WriteBatch, group_key, seq_key
from mrs.storage.journal_check import verify_before_open
from sim.processes import ServerStartError

PAGE_BYTES = 4096


async def _fill(bus, count: int) -> None:
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(count):
            await sender.put(
                b"msg-%04d-" % index + b"x" * 150,
                target="ANYORDER",
                delivery=DeliveryMode.WF_DQF,
                uma=Uma.DISC,
            )


def _mrs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, timeout=120
    )


async def test_a_journal_lmdb_cannot_read_is_refused_in_one_line(make_bus) -> None:
    bus = make_bus()
    await _fill(bus, 100)
    bus.kill()
    data_file = bus.data_dir / "journals" / "data.mdb"
    # Cut the file short: LMDB would touch pages past its end and die of SIGBUS.
    os.truncate(data_file, data_file.stat().st_size // 2)
    with pytest.raises(ServerStartError):
        bus.start()
    assert bus.process.process.returncode == 1
    log_lines = bus.log_text().splitlines()
    refusal = [line for line in log_lines if line.startswith("mrs: ")]
    assert len(refusal) == 1
    assert f"journal {data_file} is damaged" in refusal[0]
    assert "mrs journal salvage" in refusal[0]
    assert not any("Traceback" in line for line in log_lines)


async def test_verify_and_salvage_copy_out_every_intact_record(make_bus, tmp_path) -> None:
    bus = make_bus()
    count = 300
    await _fill(bus, count)
    bus.kill()
    data_file = bus.data_dir / "journals" / "data.mdb"
    data = bytearray(data_file.read_bytes())
    # Damage one whole page (LMDB cannot read it) and one record (its checksum fails),
    # in every copy: older copies of a page lie in pages earlier commits freed.
    damaged = _pages_holding(data, b"msg-0150-")
    for page in damaged:
        data[page : page + 16] = b"\xff" * 16
    flipped = _pages_holding(data, b"msg-0010-")
    assert flipped and not set(flipped) & set(damaged)
    for page in flipped:
        body_at = data.find(b"msg-0010-", page)
        data[body_at + 4] ^= 0xFF
    data_file.write_bytes(bytes(data))

    verify = _mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1", "--json")
    assert verify.returncode == 1, verify.stderr
    report = json.loads(verify.stdout)
    dqf = next(item for item in report["databases"] if item["database"] == "dqf")
    assert not report["intact"] and dqf["damage"] and len(dqf["corrupt"]) == 1
    lost_on_page = count - 1 - dqf["readable"]
    assert 0 < lost_on_page < 40  # only what sat on the damaged page

    rescue = tmp_path / "rescued"
    salvage = _mrs(
        "journal", "salvage", "--config", str(bus.config_path), "--group", "1",
        "--to", str(rescue), "--json",
    )  # fmt: skip
    assert salvage.returncode == 0, salvage.stderr
    assert json.loads(salvage.stdout)["copied"] >= dqf["readable"]
    assert _mrs("journal", "verify", "--data-dir", str(rescue)).returncode == 0

    # A server on the salvaged copy delivers every intact message, once each.
    shutil.rmtree(bus.data_dir)
    shutil.copytree(rescue, bus.data_dir)
    address = bus.start()
    bodies = []
    async with connect(address, queue="ANYORDER") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                break
            bodies.append(message.body[:8])
            await receiver.confirm(message.seq)
    assert len(bodies) == len(set(bodies)) == dqf["readable"]
    assert b"msg-0010" not in bodies and b"msg-0000" in bodies and b"msg-0299" in bodies


def _dqf_key_of(bus, body_prefix: bytes) -> bytes:
    """The DQF key of the message whose body starts with `body_prefix` (server stopped)."""
    store = JournalStore(bus.data_dir / "journals", readonly=True)
    try:
        return next(
            key
            for key, record in store.scan(Journal.DQF)
            if isinstance(record, Record) and record.body.startswith(body_prefix)
        )
    finally:
        store.close()


def _pages_holding(data: bytearray, pattern: bytes) -> list[int]:
    """Offsets of the leaf pages whose nodes hold `pattern`: every copy, as older
    ones may lie in free pages, but not the stale bytes between a page's node
    pointers and its nodes (`lower` to `upper`), which LMDB leaves as they were."""
    pages = []
    at = data.find(pattern)
    while at >= 0:
        page = at // PAGE_BYTES * PAGE_BYTES
        flags, _lower, upper = struct.unpack_from("<HHH", data, page + 10)
        if flags & 0x02 and at - page >= upper:
            pages.append(page)
        at = data.find(pattern, page + PAGE_BYTES if at - page >= upper else at + 1)
    return pages


def _refusal(bus) -> str:
    """The server's one-line refusal to start; no traceback in its log."""
    with pytest.raises(ServerStartError):
        bus.start()
    assert bus.process.process.returncode == 1
    log_lines = bus.log_text().splitlines()
    assert not any("Traceback" in line for line in log_lines)
    refusal = [line for line in log_lines if line.startswith("mrs: ")]
    assert len(refusal) == 1, log_lines[-5:]
    assert "mrs journal verify" in refusal[0] and "mrs journal salvage" in refusal[0]
    return refusal[0]


async def _drain(address: str) -> list[bytes]:
    bodies = []
    async with connect(address, queue="ANYORDER") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                return bodies
            bodies.append(message.body[:8])
            await receiver.confirm(message.seq)


@pytest.mark.parametrize(
    ("where", "flip"),
    [("dqf", 0x80), ("dqf", 0x01), ("index", 0x80)],
    ids=["dqf", "dqf-onto-a-neighbour", "index"],
)
async def test_a_flipped_key_bit_is_refused_at_start_and_salvage_refiles_the_record(
    make_bus, tmp_path, where: str, flip: int
) -> None:
    """A bit flipped in a DQF key leaves a sound record under a seq nothing asks for,
    or under a neighbour's (in the index's key: a seq with no record, and the record
    never loaded): the group must not start and strand it; verify names the key;
    salvage files the record under its own key again (the neighbour kept), and every
    message is delivered from the copy."""
    bus = make_bus()
    count = 40
    await _fill(bus, count)
    bus.kill()
    key = _dqf_key_of(bus, b"msg-0020-")
    data_file = bus.data_dir / "journals" / "data.mdb"
    data = bytearray(data_file.read_bytes())
    # A DQF leaf node: its key, then the record; an index node: its header says an
    # empty value (then its key size, 12). Every copy of the node is flipped: older
    # copies of its page may lie in free pages, and only the file's current one counts.
    node = b"\x0c\x00" + key if where == "dqf" else bytes(6) + b"\x0c\x00" + key
    flipped = 0
    at = data.find(node)
    while at >= 0:
        if (data[at + len(node) : at + len(node) + 2] == b"\x4d\x01") == (where == "dqf"):
            data[at + len(node) - 1] ^= flip  # the seq's last byte: 0x80, a seq no message has
            flipped += 1
        at = data.find(node, at + 1)
    assert flipped
    data_file.write_bytes(bytes(data))

    refusal = _refusal(bus)
    assert f"is damaged (in its {where if where == 'dqf' else 'dqf'}" in refusal
    assert "not in" in refusal and "key index" in refusal
    assert "(queue 11 seq" in refusal

    verify = _mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1", "--json")
    assert verify.returncode == 1, verify.stdout
    report = json.loads(verify.stdout)
    dqf = next(item for item in report["databases"] if item["database"] == "dqf")
    assert not report["intact"] and dqf["inconsistent"] and not dqf["corrupt"]
    if where == "dqf":
        assert any(f"salvage files it under {key.hex()}" in line for line in dqf["inconsistent"])

    rescue = tmp_path / "rescued"
    salvage = _mrs(
        "journal", "salvage", "--config", str(bus.config_path), "--group", "1",
        "--to", str(rescue),
    )  # fmt: skip
    assert salvage.returncode == 0, salvage.stderr
    assert _mrs("journal", "verify", "--data-dir", str(rescue)).returncode == 0
    shutil.rmtree(bus.data_dir)
    shutil.copytree(rescue, bus.data_dir)
    bodies = await _drain(bus.start())
    assert sorted(bodies) == [b"msg-%04d" % index for index in range(count)]


async def test_a_page_that_lost_an_entry_is_refused_at_start(make_bus) -> None:
    """A leaf page whose header lost its last node hides that record from every walk
    and lookup: the count the last commit stamped finds it before the group serves."""
    bus = make_bus()
    await _fill(bus, 40)
    bus.kill()
    data_file = bus.data_dir / "journals" / "data.mdb"
    data = bytearray(data_file.read_bytes())
    for page in _pages_holding(data, b"msg-0020-"):
        lower = int.from_bytes(data[page + 12 : page + 14], "little")  # end of node pointers
        data[page + 12 : page + 14] = (lower - 2).to_bytes(2, "little")  # one pointer fewer
    data_file.write_bytes(bytes(data))

    refusal = _refusal(bus)
    assert "(in its dqf database): 39 entries where its last commit left 40" in refusal
    verify = _mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1")
    assert verify.returncode == 1
    assert "39 entries where its last commit left 40" in verify.stdout


@pytest.mark.parametrize("journal", [Journal.SAF, Journal.DLJ])
def test_a_record_under_another_key_is_found_before_start(tmp_path, journal: Journal) -> None:
    """A group's SAF drains each target group's records by key: one filed under
    another group's key would go to the wrong group, or to none; the DLQ handler
    deletes a handled dead letter by its seq's key."""
    journals = tmp_path / "journals"
    store = JournalStore(journals, 1 << 22)
    record = Record(7, 2, 20, 1, 13, body=b"for group 2")
    key = group_key(3, 7) if journal is Journal.SAF else seq_key(8)
    store.commit_now(WriteBatch.empty().put_record(journal, key, record))
    store.close()
    damage = verify_before_open(journals)
    assert damage is not None
    if journal is Journal.SAF:
        assert "(in its saf database): filed under key 000000030000000000000007 (group 3)" in damage
        assert "but the record is for 2" in damage
    else:
        assert (
            "(in its dlj database): filed under key 0000000000000008, but the record is seq 7"
            in damage
        )


@pytest.mark.parametrize("names", ["no page", "a used page"])
async def test_a_damaged_free_page_list_is_refused_at_start(make_bus, names: str) -> None:
    """LMDB's list of free pages is read by every write and by no read: damaged, the
    group started and then answered every get JOURNAL_FAIL (each get commits its
    delivery mark first), or would hand out a page still in use to be overwritten,
    while verify called the file intact."""
    bus = make_bus()
    await _fill(bus, 40)
    bodies = await _drain(bus.address)  # confirms free pages: the list fills
    assert len(bodies) == 40
    await _fill(bus, 10)
    bus.kill()
    data_file = bus.data_dir / "journals" / "data.mdb"
    data = bytearray(data_file.read_bytes())
    # The newer meta page names the free database's root (lmdb.h's layout, 64-bit):
    # the txn id at byte 144 of a meta page, the free database's root at byte 80.
    meta = max((0, PAGE_BYTES), key=lambda at: struct.unpack_from("<Q", data, at + 144)[0])
    root = struct.unpack_from("<Q", data, meta + 80)[0] * PAGE_BYTES
    main_root = struct.unpack_from("<Q", data, meta + 128)[0]  # the main database's root
    flags, lower = struct.unpack_from("<HH", data, root + 10)
    while not flags & 0x02:  # a branch: down its first node to a leaf
        assert flags & 0x01
        low, high, top = struct.unpack_from(
            "<HHH", data, root + struct.unpack_from("<H", data, root + 16)[0]
        )
        root = (low | high << 16 | top << 32) * PAGE_BYTES
        flags, lower = struct.unpack_from("<HH", data, root + 10)
    # a leaf: one page of (txn id -> pages it freed)
    for pointer in range(root + 16, root + lower, 2):
        node = root + struct.unpack_from("<H", data, pointer)[0]
        key_size = struct.unpack_from("<H", data, node + 6)[0]
        freed = node + 8 + key_size  # a count, then the freed page numbers
        for index in range(struct.unpack_from("<Q", data, freed)[0]):
            number = 10**9 + index if names == "no page" else main_root
            struct.pack_into("<Q", data, freed + 8 + 8 * index, number)
    data_file.write_bytes(bytes(data))

    refusal = _refusal(bus)
    if names == "no page":
        assert "(in its freelist database): freed page number 1000000000 is not" in refusal
    else:
        assert f"page {main_root} is listed as free, but a database uses it" in refusal
    verify = _mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1")
    assert verify.returncode == 1
    assert "freelist" in verify.stdout and "DAMAGED" in verify.stdout


async def test_verify_finds_a_damaged_key_index_page_as_the_start_does(make_bus) -> None:
    """The start-up check walks the DQF's key index; verify must too, or it calls
    intact a journal the group refuses to start on."""
    bus = make_bus()
    await _fill(bus, 40)
    bus.kill()
    key = _dqf_key_of(bus, b"msg-0020-")
    data_file = bus.data_dir / "journals" / "data.mdb"
    data = bytearray(data_file.read_bytes())
    node = bytes(6) + b"\x0c\x00" + key  # an index node: empty value, 12-byte key
    for page in _pages_holding(data, node):
        data[page + 8 : page + 16] = b"\xff" * 8  # its flags and bounds
    data_file.write_bytes(bytes(data))

    assert "(in its dqf-keys database)" in _refusal(bus)
    verify = _mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1", "--json")
    assert verify.returncode == 1, verify.stdout
    report = json.loads(verify.stdout)
    index = next(item for item in report["databases"] if item["database"] == "dqf-keys")
    assert index["damage"] and not report["intact"]
