"""The admin actions' rules kept by the group itself, on real `mrs serve` processes over
real TCP and LMDB: the grant rule for every asker (a program's `client.admin()`, an
earlier release's `mrs admin`), a flood of refusals that cannot push the trail out of
the admin journal, and a browse page deep in a queue found by a seek, not a walk."""

from __future__ import annotations

import json
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import PutItem, connect_sync
from mrs.errors import BadParameter, NotAuthorized
from mrs.group import seq_deltas
from mrs.group.seq_deltas import ESCAPE, SeqDeltas
from mrs.limits import ADMIN_REFUSAL_INTERVAL_S, ADMIN_REFUSAL_LINES_MAX
from mrs.ops.admin_actions import JOURNAL_FILE_NAME
from mrs.security.permissions import GRANT_KINDS
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.auth_helpers import SecureBus, add_principal, creds, password_of
from tests.cli_helpers import run_mrs
from tests.conftest import Bus
from tests.process.test_web_bus_admin import WebSession, _web_endpoint

pytestmark = pytest.mark.xdist_group("admin")

FLOOD = 300
"""Refused requests one principal sends in a loop."""
DEEP = 30_000
"""Messages on the queue whose last page is browsed."""


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[SecureBus]:
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    assert bus.config_path is not None
    add_principal(bus.config_path, "boss", ["--manage", "*", "--admin", "config",
                                            "--admin", "status"])  # fmt: skip
    bus.start()
    yield bus
    bus.stop()


def _journal_lines(bus: SecureBus) -> list[dict]:
    path = bus.directory / "g1" / JOURNAL_FILE_NAME
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_group_keeps_the_grant_rule_for_every_asker(secure: SecureBus) -> None:
    """`client.admin("grant", principal=NAME)` with no right took every grant away (the
    operator's own included: locked out), because the rule was in `mrs admin` and the
    web page only. The group refuses it now, and an earlier `mrs admin grant --none`
    (each right sent empty) is refused in words that say why; `none=True` and this
    release's `--none` take the grants away."""
    creds_file = secure.directory / "creds.toml"
    before = creds_file.read_text()
    with connect_sync(secure.address(1), None, credentials=creds("boss")) as boss:
        with pytest.raises(BadParameter, match="boss: no right given, which would take"):
            boss.admin("grant", principal="boss")
        empty: dict[str, list[str]] = {kind: [] for kind in GRANT_KINDS}
        with pytest.raises(BadParameter, match="an earlier `mrs admin grant` sends its none"):
            boss.admin("grant", principal="consumer", **empty)
        with pytest.raises(BadParameter, match="none must be true or false, got str"):
            boss.admin("grant", principal="consumer", none="yes")
        with pytest.raises(BadParameter, match="`none=true` with rights given"):
            boss.admin("grant", principal="consumer", none=True, attach=["1.10"])
        assert creds_file.read_text() == before
        assert boss.admin("connections")["connections"]  # the operator may still act
        taken = boss.admin("grant", principal="consumer", none=True)
        assert taken["attach"] == [] and taken["confirm"] == [], taken
    boss_env = {"MRS_AUTH_NAME": "boss", "MRS_AUTH_PASSWORD": password_of("boss")}
    with (
        connect_sync(secure.address(1), "1.10", credentials=creds("reader")) as reader,
        pytest.raises(NotAuthorized, match="reader: get from 1.10 is not granted"),
    ):
        cli = run_mrs("admin", "grant", "reader", "--none", "--address",
                      secure.address(1), env=boss_env)  # fmt: skip
        assert cli.returncode == 0 and "replaced: none" in cli.stdout, cli.stderr
        reader.get(timeout=5.0)  # refused once its grants are gone
    refused = [line for line in _journal_lines(secure) if "refused" in line["result"]]
    assert [line["action"] for line in refused] == ["grant"] * 4, refused


def _counted_so_far(bus: SecureBus) -> tuple[int, int]:
    """The reader's refusals journaled one by one, and those journaled as a count."""
    lines = [line for line in _journal_lines(bus) if line["principal"] == "reader"]
    counted = sum(line["result"]["count"] for line in lines if line["action"] == "refusals")
    return sum(line["action"] != "refusals" for line in lines), counted


def test_a_flood_of_refusals_is_counted_not_journaled_line_by_line(secure: SecureBus) -> None:
    """Every refusal was a synced admin-journal line: a principal with no right asking
    in a loop cost an fsync per request and pushed the last purge out of the 10,000
    lines `mrs admin journal` shows. Now a principal's first ADMIN_REFUSAL_LINES_MAX per
    interval are journaled, the rest counted and journaled as one line."""
    with connect_sync(secure.address(1), "1.13", credentials=creds("producer")) as sender:
        sender.put(b"order", "1.10")
    with connect_sync(secure.address(1), None, credentials=creds("boss")) as boss:
        assert boss.admin("purge", queue="1.10", reason="bad feed")["dead_lettered"] == 1
    started_s = time.monotonic()
    with connect_sync(secure.address(1), None, credentials=creds("reader")) as reader:
        for _ in range(FLOOD):
            with pytest.raises(NotAuthorized):
                reader.admin("browse", queue="1.10")
    intervals = int((time.monotonic() - started_s) // ADMIN_REFUSAL_INTERVAL_S) + 1
    one_by_one, counted = _counted_so_far(secure)
    assert one_by_one <= ADMIN_REFUSAL_LINES_MAX * intervals < FLOOD // 2, one_by_one
    deadline_s = time.monotonic() + 3 * ADMIN_REFUSAL_INTERVAL_S
    while one_by_one + counted < FLOOD and time.monotonic() < deadline_s:
        time.sleep(0.2)  # the count line is written once the interval is over
        one_by_one, counted = _counted_so_far(secure)
    assert one_by_one + counted == FLOOD, (one_by_one, counted)
    boss_env = {"MRS_AUTH_NAME": "boss", "MRS_AUTH_PASSWORD": password_of("boss")}
    shown = run_mrs("admin", "journal", "--limit", "100", "--json", "--address",
                    secure.address(1), env=boss_env)  # fmt: skip
    records = json.loads(shown.stdout)["records"]
    assert [r["action"] for r in records if r["principal"] == "boss"] == ["purge"]
    count_lines = [r for r in records if r["action"] == "refusals"]
    assert count_lines and count_lines[-1]["result"]["actions"] == {"browse": counted - sum(
        r["result"]["count"] for r in count_lines[:-1])}  # fmt: skip
    assert "more refusals not journaled one by one" in secure.log(1)


SEQ_MAX = (1 << 64) - 1


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 1 << 60),
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.lists(st.one_of(st.integers(1, 3), st.just(ESCAPE),
                      st.integers(-(1 << 50), 1 << 50)), min_size=1, max_size=30)),
            st.tuples(st.just("recover"), st.lists(st.integers(1, 3), max_size=40)),
            st.tuples(st.just("take"), st.integers(0, 25)),
            st.tuples(st.just("after"), st.integers(0, 60)),
        ),
        max_size=40,
    ),
)  # fmt: skip
def test_the_seek_finds_each_seq_exactly(first: int, operations: list) -> None:
    """`SeqDeltas.after` (a browse page's start) gives exactly the seqs behind a seq,
    with seqs of several groups mixed in, after takes and compactions."""
    seq_deltas.MARK_SLOTS, seq_deltas.COMPACT_AFTER = 4, 8  # many marks and compactions
    try:
        seqs, last = SeqDeltas(), first
        model: list[int] = []
        for action, value in operations:
            if action == "take":
                assert seqs.take(value) == model[:value]
                model = model[value:]
            elif action == "after":
                wanted = model[value % len(model)] if model else first
                rest = seqs.after(wanted)
                assert (rest is None) == (wanted not in model)
                assert rest is None or list(rest) == model[model.index(wanted) + 1 :]
            else:
                new = []
                for step in value:
                    last = min(max(last + step, 0), SEQ_MAX)
                    new.append(last)
                for seq in new if action == "put" else ():
                    seqs.append(seq)
                if action == "recover":
                    seqs.extend(array("Q", new))
                model += new
    finally:
        seq_deltas.MARK_SLOTS, seq_deltas.COMPACT_AFTER = 1024, 1 << 16


def test_the_last_page_of_a_deep_queue_is_found_by_its_cursor(make_bus) -> None:
    """`mrs admin browse --after SEQ` finds SEQ by a seek over the queue's seqs (marks
    every 1,024 slots), not a walk from the front (the last page of 200,000 took 55 ms
    against 0.5 ms for the first: benchmarks/README.md); the page it finds past many
    marks is exactly the messages after the cursor, and the last says there is no
    next one. Time is measured there, not asserted here."""
    bus: Bus = make_bus(limits=f"dqf_messages_max = {DEEP + 10}")
    with connect_sync(bus.address, "SENDER") as sender:
        for start in range(0, DEEP, 5_000):
            items = [PutItem(b"order %d" % i, "ORDERS") for i in range(start, start + 5_000)]
            assert all(not isinstance(psb, Exception) for psb in sender.put_many(items))
    with connect_sync(bus.address, None) as client:
        first_seq = client.admin("browse", queue="ORDERS", limit=1)["messages"][0]["seq"]
        after = first_seq + DEEP - 21  # one group's seqs: consecutive
        page = client.admin("browse", queue="ORDERS", limit=20, after=after)
        assert [m["preview"] for m in page["messages"]] == [
            f"order {i}" for i in range(DEEP - 20, DEEP)
        ]
        assert page["next_after"] is None and not page.get("after_gone"), page


def _web_group(tmp_path: Path) -> Path:
    config = tmp_path / "bus.toml"
    config.write_text(f"""
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:{free_port()}"
data_dir = "g1"
[group.ops]
web_listen = "127.0.0.1:0"
web_admin = true
[[group.queue]]
id = 10
name = "ORDERS"
""")
    return config


def test_the_web_pages_lines_are_in_the_journal_the_group_reads(tmp_path: Path) -> None:
    """The group's requests and its web page each had an AdminLog of their own over the
    same journal: each listed (and trimmed to 10,000) only the lines it wrote, so once
    `mrs admin journal` had been asked, nothing done on the web page after it showed
    there. One AdminLog per file now."""
    group = GroupProcess(_web_group(tmp_path), 1)
    group.start()
    try:
        page = WebSession(_web_endpoint(group.address))
        with connect_sync(group.address, None) as client:
            assert client.admin("purge", queue="ORDERS")["left"] == 0
            assert [r["action"] for r in client.admin("journal")["records"]] == ["purge"]
            status, answer = page.act("set_limits", queue="ORDERS", unconfirmed_max=7)
            assert status == 200 and answer["unconfirmed_max"] == 7, answer
            status, answer = page.act("browse", queue="NOPE")
            assert status == 400, answer
            shown = [r["action"] for r in client.admin("journal")["records"]]
    finally:
        group.terminate()
    assert shown == ["purge", "set_limits", "browse"], shown
