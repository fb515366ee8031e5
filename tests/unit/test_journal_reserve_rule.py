"""The journal reserve's answer per put, in process: the shortcut `accepts` takes
between measures (one comparison with the room left) must answer exactly as the
full tests do, whatever the sizes, the journal's fill, the disk's free space and
the time between puts."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrs.limits import RESERVE_MEASURE_INTERVAL_S
from mrs.storage import journal_measure, journal_reserve
from mrs.storage.journal_reserve import RECORD_OVERHEAD_BYTES, JournalReserve

CAP_BYTES = 256 << 10
RESERVE_BYTES = 32 << 10


@dataclass
class _Machine:
    """What the reserve measures: pages in use, disk free, and the monotonic clock."""

    used_bytes: int = 0
    disk_free_bytes: int = 1 << 30
    now_s: float = 100.0


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> _Machine:
    state = _Machine()
    monkeypatch.setattr(journal_measure, "pages_in_use_bytes", lambda store: state.used_bytes)
    monkeypatch.setattr(journal_measure, "disk_free_bytes", lambda path: state.disk_free_bytes)
    monkeypatch.setattr(journal_reserve, "monotonic", lambda: state.now_s)
    return state


class _Store:
    path = "/nonexistent"


def _reserve() -> JournalReserve:
    return JournalReserve(_Store(), CAP_BYTES, RESERVE_BYTES)


STEP = st.tuples(
    st.integers(0, 60_000),  # body bytes of the put
    # time since the last put: mostly none (a burst within one measure), then a little,
    # then enough for a new measure
    st.sampled_from([0.0] * 6 + [0.001, RESERVE_MEASURE_INTERVAL_S, 1.0]),
    # the journal's pages changed: anywhere, or within a few puts of the reserve
    st.one_of(
        st.none(),
        st.integers(0, CAP_BYTES),
        st.integers(CAP_BYTES - RESERVE_BYTES - 180_000, CAP_BYTES - RESERVE_BYTES),
    ),
    st.one_of(st.none(), st.integers(0, 400_000)),  # the disk's free bytes changed
)


# The fixture only patches where the reserve looks; each example resets what it sees.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=120))
def test_the_shortcut_answers_as_the_full_tests_do(machine: _Machine, steps) -> None:
    shortcut, tested = _reserve(), _reserve()
    machine.used_bytes, machine.disk_free_bytes, machine.now_s = 0, 1 << 30, 100.0
    for body_bytes, elapsed_s, used_bytes, disk_free_bytes in steps:
        machine.now_s += elapsed_s
        if used_bytes is not None:
            machine.used_bytes = used_bytes
        if disk_free_bytes is not None:
            machine.disk_free_bytes = disk_free_bytes
        expected = tested._accepts_tested(body_bytes + RECORD_OVERHEAD_BYTES)
        assert shortcut.accepts(body_bytes) == expected
        assert shortcut.refusing == tested.refusing


def test_a_burst_is_refused_at_the_reserve_and_accepted_again_after_a_drain(
    machine: _Machine,
) -> None:
    reserve = _reserve()
    body_bytes = 10_000
    accepted = 0
    while reserve.accepts(body_bytes) is None:
        accepted += 1
        assert accepted < 1000, "never refused"
    # Never into the reserve, and not refused before what was accepted since the
    # measure, counted twice, left no room for one more.
    needed_bytes = body_bytes + RECORD_OVERHEAD_BYTES
    accepted_bytes = accepted * needed_bytes
    room_bytes = CAP_BYTES - RESERVE_BYTES
    assert (room_bytes - needed_bytes) // 2 <= accepted_bytes <= room_bytes
    assert reserve.refusing is not None and "within its reserve" in reserve.refusing
    machine.now_s += RESERVE_MEASURE_INTERVAL_S  # the consumers drained it meanwhile
    assert reserve.accepts(body_bytes) is None
    assert reserve.refusing is None


def test_a_disk_running_out_refuses_before_the_journal_does(machine: _Machine) -> None:
    machine.disk_free_bytes = RESERVE_BYTES + 50_000
    reserve = _reserve()
    answers = [reserve.accepts(20_000) for _ in range(3)]
    assert answers[:2] == [None, None]
    assert answers[2] is not None and "ENOSPC ahead" in answers[2]


def test_a_journal_at_its_reserve_switches_once_not_with_every_page(
    machine: _Machine, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal sitting at its reserve (a confirm frees a little, a put takes it) was
    refused, accepted, refused ... each switch a log line, about four a second. Once
    refusing, it accepts again only with a quarter of the reserve more free."""
    reserve = _reserve()
    body_bytes = 1_000
    edge_bytes = CAP_BYTES - RESERVE_BYTES - body_bytes - RECORD_OVERHEAD_BYTES
    caplog.set_level("INFO", logger="mrs.journal")
    answers = []
    for step in range(40):  # pages in use wander a few hundred bytes around the edge
        machine.used_bytes = edge_bytes + (300 if step % 2 == 0 else -300)
        machine.now_s += RESERVE_MEASURE_INTERVAL_S
        answers.append(reserve.accepts(body_bytes) is None)
    assert answers[0] is False and not any(answers), answers
    assert len(caplog.records) == 1  # the one WARNING when it began refusing
    machine.used_bytes = edge_bytes - RESERVE_BYTES // journal_reserve.RESERVE_RESUME_DIVISOR
    machine.now_s += RESERVE_MEASURE_INTERVAL_S
    assert reserve.accepts(body_bytes) is None
    assert [record.levelname for record in caplog.records] == ["WARNING", "INFO"]
