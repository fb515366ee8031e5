"""`mrs dump` on real journals: JSON lines, the table, bodies, every selector, corrupt
records, a copied data directory, and a consistent snapshot of a live group."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import DeliveryMode, Uma, connect
from journals import Journal, Record, seq_key
from mrs.tools.cli import main
from mrs.tools.journal.render import record_json, record_json_general
from sim.etcd import write_replicated_config
from tests.conftest import STANDARD_QUEUES
from tests.journal_helpers import (
    HOUR_NS,
    REPLAY_QUEUES,
    SEQ_BASE,
    T0_NS,
    json_lines,
    mrs,
    record,
    stopped_bus,
    write_raw,
    write_records,
)

PCJ_COUNT = 12
TARGETS = [10, 11, 21]  # ORDERS, ANYORDER, RESTORE
SOURCES = [13, 16]  # SENDER, SENDER2


def pcj_record(index: int) -> Record:
    return record(
        index,
        target_queue=TARGETS[index % 3],
        source_queue=SOURCES[index % 2],
        msg_class=5 if index < 6 else 7,
        body=b"\x00\x01binary" if index == 4 else f"order {index}".encode(),
        confirm_value=index,
        confirm_time_ns=T0_NS + index * HOUR_NS,
    )


@pytest.fixture
def journals(tmp_path: Path):
    """Group 1's data directory holding a PCJ, a DLJ, a DQF and a SAF (no server)."""
    bus = stopped_bus(tmp_path / "bus")
    path = bus.data_dir / "journals"
    write_records(path, Journal.PCJ, [pcj_record(i) for i in range(PCJ_COUNT)])
    now = time.time_ns()
    write_records(
        path,
        Journal.DLJ,
        [
            record(
                100 + i,
                target_queue=77,
                reason=-228 if i % 2 == 0 else -202,  # NO_DQF, DQF_FULL
                written_time_ns=now - i * HOUR_NS,
            )
            for i in range(6)
        ],
    )
    write_records(path, Journal.DQF, [record(200 + i) for i in range(3)])
    write_records(path, Journal.SAF, [record(300 + i, target_group=2) for i in range(2)])
    return bus


def dump(capsys, bus, *args: str) -> tuple[int, str, str]:
    code = main(["dump", "--config", str(bus.config_path), "--group", "1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def iso(time_ns: int) -> str:
    return datetime.datetime.fromtimestamp(time_ns / 1e9, datetime.UTC).isoformat()


def indices(out: str) -> list[int]:
    return [item["seq"] - SEQ_BASE for item in json_lines(out)]


# ---------------------------------------------------------------------- output
def test_json_lines_carry_one_object_per_record_and_the_summary_goes_to_stderr(
    capsys, journals
) -> None:
    code, out, err = dump(capsys, journals, "pcj", "--json")
    assert code == 0
    items = json_lines(out)
    assert len(out.splitlines()) == PCJ_COUNT and indices(out) == list(range(PCJ_COUNT))
    first = items[0]
    assert first["journal"] == "pcj" and first["target"] == "1.10" and first["source"] == "1.13"
    assert (first["class"], first["type"], first["priority"]) == (5, 0, 0)
    assert first["correlation_id"] == "corr-0" and first["delivery"] == "WF_DQF"
    assert first["uma"] == "DLJ" and first["confirm_value"] == 0
    assert first["time"] == "2023-11-14T22:13:20.000000Z"  # the confirm time, UTC
    assert "body" not in first and first["bytes"] == len(b"order 0")
    total = sum(len(pcj_record(i).body) for i in range(PCJ_COUNT))
    assert f"pcj of group 1: {PCJ_COUNT} records, {total} body bytes" in err
    assert "oldest 2023-11-1" in err and "newest 2023-11-15" in err

    code, out, _ = dump(capsys, journals, "dlj", "--json")
    assert [item["reason_name"] for item in json_lines(out)] == ["NO_DQF", "DQF_FULL"] * 3
    _, out, _ = dump(capsys, journals, "dqf", "--json")
    assert [item["target"] for item in json_lines(out)] == ["1.10"] * 3
    _, out, _ = dump(capsys, journals, "saf", "--json")
    assert [item["target"] for item in json_lines(out)] == ["2.10"] * 2


def test_json_output_pipes_into_a_json_reader(journals) -> None:
    """The installed `dmqdump` alias, through a real pipe: stdout is only JSON."""
    dmqdump = Path(sys.executable).with_name("dmqdump")
    command = [str(dmqdump), "--config", str(journals.config_path), "--group", "1"]
    result = subprocess.run([*command, "pcj", "--json"], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    reader = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json,sys; print(sum(1 for l in sys.stdin if json.loads(l)))",
        ],
        input=result.stdout,
        capture_output=True,
        timeout=60,
    )
    assert reader.stdout.strip() == str(PCJ_COUNT).encode()
    assert b"records" in result.stderr


def test_the_table_is_aligned_and_ends_with_the_summary(capsys, journals) -> None:
    code, out, _ = dump(capsys, journals, "pcj")
    assert code == 0
    lines = out.splitlines()
    header = lines[0]
    assert header.split()[:4] == ["seq", "time", "source", "target"] and "confirm" in header
    rows = lines[1 : 1 + PCJ_COUNT]
    column = header.index("target")
    assert [row[column : column + 4] for row in rows] == [
        f"1.{TARGETS[i % 3]}" for i in range(PCJ_COUNT)
    ]
    seq_end = header.index("seq") + len("seq")
    assert all(row[:seq_end].strip() == str(SEQ_BASE + i) for i, row in enumerate(rows))
    assert lines[-1].startswith(f"pcj of group 1: {PCJ_COUNT} records")


def test_bodies_as_text_or_hex_preview_or_full(capsys, journals) -> None:
    long_body = ("ü" * 40).encode()
    write_records(journals.data_dir / "journals", Journal.PCJ, [record(50, body=long_body)])
    _, out, _ = dump(capsys, journals, "pcj", "--json", "--body", "--seq", f"{SEQ_BASE + 3}..")
    by_index = {item["seq"] - SEQ_BASE: item for item in json_lines(out)}
    assert by_index[3]["body"] == "order 3" and not by_index[3]["body_truncated"]
    assert by_index[4]["body"] == "hex:" + b"\x00\x01binary".hex()
    preview = by_index[50]
    assert preview["body_truncated"] and long_body.decode().startswith(preview["body"])
    assert len(preview["body"].encode()) <= 48
    _, out, _ = dump(capsys, journals, "pcj", "--json", "--body-full", "--seq", str(SEQ_BASE + 50))
    assert json_lines(out)[0]["body"] == long_body.decode()
    _, out, _ = dump(capsys, journals, "pcj", "--body", "--seq", str(SEQ_BASE + 4))
    assert "hex:0001" in out


# ---------------------------------------------------------------------- selectors
ODD = [i for i in range(PCJ_COUNT) if i % 2]


@pytest.mark.parametrize(
    "selection, expected",
    [
        (["--seq", f"{SEQ_BASE + 2}..{SEQ_BASE + 5}"], [2, 3, 4, 5]),
        (["--seq", f"{SEQ_BASE + 9}.."], [9, 10, 11]),
        (["--seq", f"..{SEQ_BASE + 1}"], [0, 1]),
        (["--since", iso(T0_NS + 3 * HOUR_NS), "--until", iso(T0_NS + 5 * HOUR_NS)], [3, 4, 5]),
        (["--target", "ANYORDER"], [1, 4, 7, 10]),
        (["--target", "1.1?"], [i for i in range(PCJ_COUNT) if i % 3 != 2]),
        (["--target", "NYC.RESTORE", "--target", "1.10"], [i for i in range(12) if i % 3 != 1]),
        (["--source", "SENDER2"], ODD),
        (["--source", "*.1[6]"], ODD),
        (["--class", "7"], list(range(6, 12))),
        (["--type", "1", "--type", "2"], [i for i in range(PCJ_COUNT) if i % 3]),
        (["--contains", "order 1"], [1, 10, 11]),
        (["--contains", "hex:0001"], [4]),
        (["--contains", "order", "--not-contains", "order 1"], [0, 2, 3, 5, 6, 7, 8, 9]),
        (["--confirm-value", "3..4"], [3, 4]),
        (["--limit", "2", "--class", "7"], [6, 7]),
        (["--class", "5", "--source", "SENDER", "--target", "ORDERS"], [0]),
    ],
)
def test_every_selector_on_the_pcj(capsys, journals, selection, expected) -> None:
    code, out, err = dump(capsys, journals, "pcj", "--json", *selection)
    assert code == 0, err
    assert indices(out) == expected


def test_reason_and_relative_time_on_the_dlj(capsys, journals) -> None:
    _, out, _ = dump(capsys, journals, "dlj", "--json", "--reason", "NO_DQF")
    assert indices(out) == [100, 102, 104]
    _, out, _ = dump(capsys, journals, "dlj", "--json", "--reason", "-202", "--since", "150m")
    assert indices(out) == [101]  # written 1 h ago; 103 and 105 are older


@pytest.mark.parametrize(
    "selection, problem",
    [
        (["--seq", "9..5"], "--seq: empty range"),
        (["--since", "yesterday"], "--since: not a time"),
        (["--target", "ORDRES"], "no queue named 'ORDRES'"),
        (["--reason", "NO_DQF"], "applies to the dlj"),
        (["--contains", "hex:zz"], "not hex"),
    ],
)
def test_invalid_selections_are_refused_with_a_clear_message(
    capsys, journals, selection, problem
) -> None:
    code, out, err = dump(capsys, journals, "pcj", "--json", *selection)
    assert code == 2 and out == ""
    assert problem in err and err.count("\n") == 1


# ---------------------------------------------------------------------- damage, copies
def test_corrupt_records_are_reported_counted_and_never_shown(capsys, journals) -> None:
    bad_key = seq_key(SEQ_BASE + 5)
    write_raw(journals.data_dir / "journals", Journal.PCJ, bad_key, b"\x4d\x01garbage")
    code, out, err = dump(capsys, journals, "pcj", "--json")
    assert code == 1
    assert indices(out) == [i for i in range(PCJ_COUNT) if i != 5]
    assert f"corrupt record in pcj at key {bad_key.hex()}" in err
    assert "1 CORRUPT record (reported above" in err


def test_a_copied_data_directory_dumps_without_the_config(capsys, journals, tmp_path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(journals.data_dir, copy)
    code = main(["dump", "--data-dir", str(copy), "--group", "1", "pcj", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0 and indices(out) == list(range(PCJ_COUNT))
    assert main(["dump", "--data-dir", str(copy / "journals"), "--group", "1", "pcj"]) == 0
    capsys.readouterr()
    code = main(["dump", "--data-dir", str(copy), "--group", "1", "pcj", "--target", "ORDERS"])
    assert code == 2 and "need --config" in capsys.readouterr().err
    code = main(["dump", "--data-dir", str(tmp_path / "nothing"), "--group", "1", "pcj"])
    assert code == 2 and "no journals in" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()  # looking never creates an environment


def test_a_data_directory_dumps_without_a_group_number(capsys, journals, tmp_path) -> None:
    code = main(["dump", "--data-dir", str(journals.data_dir), "pcj", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert indices(out) == list(range(PCJ_COUNT))
    assert f"pcj: {PCJ_COUNT} records" in err
    code = main(["dump", "--data-dir", str(tmp_path / "nothing"), "pcj"])
    assert code == 2 and "no journals in" in capsys.readouterr().err


# ---------------------------------------------------------------------- live group
async def test_dump_of_a_live_group_is_a_consistent_snapshot(make_bus) -> None:
    """Eight senders put and a receiver confirms while dump reads the DQF. Every state
    the server commits holds a contiguous run of the put seqs (confirmed ones gone from
    the front, new ones added at the back): the dump must show exactly such a run."""
    bus = make_bus(limits="dqf_messages_max = 1000000", queues=REPLAY_QUEUES)
    acked: list[int] = []
    enough = trio.Event()
    stop = False

    async with (
        connect(bus.address, queue="SENDER") as sender,
        connect(bus.address, queue="ANYORDER") as receiver,
    ):

        async def produce() -> None:
            while not stop:
                psb = await sender.put(
                    b"x" * 200, "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
                )
                acked.append(psb.seq)
                if len(acked) >= 1500:
                    enough.set()

        async def consume(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                while True:
                    message = await receiver.get()
                    await receiver.confirm(message.seq)

        async with trio.open_nursery() as nursery:
            consumer = await nursery.start(consume)
            for _ in range(8):
                nursery.start_soon(produce)
            await enough.wait()
            before = len(acked)
            result = await trio.run_process(
                [sys.executable, "-m", "mrs", "dump", "--config", str(bus.config_path)]
                + ["--group", "1", "dqf", "--json", "--target", "ANYORDER"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            during = len(acked) - before
            stop = True
            consumer.cancel()

    assert result.returncode == 0, result.stderr
    seqs = [item["seq"] for item in json_lines(result.stdout.decode())]
    assert during > 0, "puts kept flowing while the dump read"
    assert seqs, "the DQF was not empty"
    every = sorted(acked)
    start = every.index(seqs[0])
    assert seqs == every[start : start + len(seqs)]
    assert f"dqf of group 1: {len(seqs)} records".encode() in result.stderr


# ---------------------------------------------------------------------- the fast path
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
)
HEADER_VALUES = st.one_of(SCALARS, st.floats(), st.lists(SCALARS | st.floats(), max_size=3))
HEADERS = st.dictionaries(st.text(max_size=6), HEADER_VALUES) | st.dictionaries(
    SCALARS | st.floats(), HEADER_VALUES | st.dictionaries(SCALARS, SCALARS, max_size=2)
)
"""Headers as the wire lets a client send them (any plain msgpack map, protocol.md):
keys of bytes, ints or None, NaN and infinity among the floats."""


def strict_json(line: str) -> object:
    """`line` read as JSON, refusing NaN and Infinity (not JSON: other readers fail)."""

    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} in {line!r}")

    return json.loads(line, parse_constant=refuse)


@settings(max_examples=200, deadline=None)
@given(
    item=st.builds(
        Record,
        seq=st.integers(0, 2**64 - 1),
        target_group=st.integers(-(2**63), 2**63 - 1),
        target_queue=st.integers(0, 999),
        source_group=st.integers(0, 32000),
        source_queue=st.integers(0, 999),
        body=st.binary(max_size=80) | st.text(max_size=60).map(str.encode),
        msg_class=st.integers(-(2**63), 2**63 - 1),
        msg_type=st.integers(-(2**63), 2**63 - 1),
        priority=st.integers(0, 99),
        delivery=st.sampled_from([26, 31, 7]),
        uma=st.sampled_from([1, 2, 9]),
        correlation_id=st.binary(max_size=32) | st.just(b"hex:00"),
        put_time_ns=st.integers(-(2**63), 2**63 - 1),
        written_time_ns=st.integers(0, 2**63 - 1),
        confirm_value=st.integers(-(2**63), 2**63 - 1),
        confirm_time_ns=st.sampled_from([0, T0_NS, 253402300799 * 10**9 + 1]),
        reason=st.sampled_from([0, -228, -9999]),
        extra=st.one_of(
            st.just({}),
            st.builds(lambda h: {"headers": h}, HEADERS),
            st.builds(lambda p: {"principal": p}, st.text(max_size=20) | st.integers()),
        ),
    ),
    journal=st.sampled_from(list(Journal)[:4]),
    body=st.sampled_from([None, "preview", "full"]),
)
def test_the_fast_json_line_equals_the_general_one(item, journal, body) -> None:
    fast = record_json(journal, item, body)
    assert "\n" not in fast
    assert strict_json(fast) == strict_json(record_json_general(journal, item, body))


def test_a_replicated_groups_journals_are_read_from_the_instance_named(tmp_path) -> None:
    """Each instance holds its own copy of a replicated group's journals (a replica may
    be behind): the journal tools read the instance `--instance` names, and without it
    say so in one line instead of reading the first one listed (the audit asks for
    the instance's --data-dir)."""
    config = write_replicated_config(tmp_path, "http://127.0.0.1:1", STANDARD_QUEUES)
    (tmp_path / "b" / "journals").mkdir(parents=True)
    write_records(tmp_path / "b" / "journals", Journal.DQF, [record(1)])
    shown = mrs("dump", "--config", str(config), "--group", "1", "--instance", "b", "dqf", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [line["seq"] for line in json_lines(shown.stdout)] == [record(1).seq]
    unnamed = mrs("dump", "--config", str(config), "--group", "1", "dqf")
    assert unnamed.returncode == 2
    assert unnamed.stderr.strip().splitlines() == [
        "mrs dump: group 1 (NYC) is replicated: say whose journals with --instance NAME "
        "(a, b, c; the active's hold every answered commit, `mrs status` names it)"
    ]
    unknown = mrs("dump", "--config", str(config), "--group", "1", "--instance", "z", "dqf")
    assert unknown.returncode == 2 and "has no instance 'z' (a, b, c)" in unknown.stderr
    audited = mrs("audit", "--config", str(config))
    assert audited.returncode == 2
    assert audited.stderr.strip().splitlines() == [
        "mrs audit: group 1 (NYC) is replicated: give one instance's data directory with "
        "--data-dir (a, b, c; the active's hold every answered commit, `mrs status` names it)"
    ]
