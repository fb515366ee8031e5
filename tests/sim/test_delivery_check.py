"""sim.checker.check_delivered: the core guarantees the swarm, the crash and link-fault
tests and `mrs demo` are all judged by, checked against hand-made broken histories."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mrs.model import Status
from sim.checker import check_delivered

OK, DUP = int(Status.CONFIRMREQ), int(Status.POSSDUPL)


@st.composite
def clean_run(draw):
    """Producers' messages interleaved, each producer's in order, each delivered once
    (or again, marked POSSDUPL); a random subset acknowledged."""
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    queues = {p: [f"p{p}:{c}" for c in range(n)] for p, n in enumerate(counts)}
    deliveries = []
    while any(queues.values()):
        producer = draw(st.sampled_from([p for p, q in queues.items() if q]))
        message_id = queues[producer].pop(0)
        deliveries.append((message_id, OK))
        if draw(st.booleans()):
            deliveries.append((message_id, DUP))
    delivered = [m for m, _ in deliveries]
    acknowledged = draw(st.sets(st.sampled_from(delivered))) if delivered else set()
    return acknowledged, deliveries


@given(clean_run())
def test_a_clean_run_passes(run) -> None:
    acknowledged, deliveries = run
    assert check_delivered(acknowledged, deliveries).ok


@given(clean_run(), st.data())
def test_dropping_an_acknowledged_message_is_lost(run, data) -> None:
    acknowledged, deliveries = run
    if not acknowledged:
        return
    victim = data.draw(st.sampled_from(sorted(acknowledged)))
    kept = [(m, s) for m, s in deliveries if m != victim]
    verdict = check_delivered(acknowledged, kept)
    assert verdict.lost == [victim] and not verdict.ok


def test_an_unmarked_redelivery_and_an_order_swap_are_caught() -> None:
    verdict = check_delivered({"a:0"}, [("a:0", OK), ("a:0", OK)])
    assert verdict.unmarked_duplicates == ["a:0"]
    verdict = check_delivered(set(), [("a:1", OK), ("a:0", OK), ("b:0", OK)])
    assert verdict.order_violations == ["a"]
    verdict = check_delivered(set(), [("x:0", OK)], sent={"a:0"})
    assert verdict.unexpected == ["x:0"] and "unexpected" in verdict.failures()


def test_with_an_identity_a_resend_is_a_copy_not_a_duplicate() -> None:
    """mrs demo: the same order id stored twice (a resend after a lost answer) is
    another message; the same seq again without POSSDUPL is a duplicate."""
    resend = check_delivered({"000001"}, [("000001", OK, 5), ("000001", OK, 9)])
    assert resend.ok and resend.resent_copies == 1
    again = check_delivered({"000001"}, [("000001", OK, 5), ("000001", OK, 5)])
    assert again.unmarked_duplicates == ["000001"]
