"""The copies waiting for an earlier copy's commit (same dedupe key) are bounded: an
application's put beyond the bound is refused QUEUE_BUSY before it is answered (no
UMA runs), a peer's copy is answered LINK_DOWN (its sender keeps it in its SAF), and
every copy that did wait is answered with the first copy's seq once it is durable.
In process: real LMDB journals with fsync, the production InlineWriter."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs import protocol as wire
from mrs.core.delivery import Refused
from mrs.group.shapes import Entry
from mrs.model import Address, DeliveryMode, Status, Uma
from tests.process.test_group_rooms import only, open_node

WAITERS_MAX = 3


@pytest.fixture
def node(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("mrs.group.dqf.DEDUPE_WAITERS_MAX", WAITERS_MAX)
    opened = open_node(tmp_path, 1, dqf_messages_max=100)
    yield opened
    opened.close()


def keyed_put(request_id: int, key: str = "order-1") -> wire.Put:
    return wire.Put(
        request_id, "IN", b"same body", int(DeliveryMode.WF_DQF), int(Uma.DLQ),
        0, 0, 0, 0, b"", "", {"idempotency_key": key},
    )  # fmt: skip


def test_an_application_copy_beyond_the_bound_is_refused_queue_busy(node) -> None:
    sender = node.session("OUT")
    for request_id in range(1, 2 + WAITERS_MAX):  # the first copy, then WAITERS_MAX waiting
        node.group.put(sender, keyed_put(request_id))
    assert sender.events == []  # nothing durable yet: nobody answered
    assert node.group.dqf.dedupe_waiters == WAITERS_MAX
    with pytest.raises(Refused) as refused:
        node.group.put(sender, keyed_put(99))
    assert refused.value.status == Status.QUEUE_BUSY
    assert "try again later" in refused.value.message
    # another key is not held up by this one's waiters
    node.group.put(sender, keyed_put(50, key="order-2"))
    node.commit()
    answers = {event.request_id: event for event in sender.events}
    assert set(answers) == {*range(1, 2 + WAITERS_MAX), 50}
    first_seq = answers[1].seq
    for request_id in range(1, 2 + WAITERS_MAX):
        done = answers[request_id]
        assert isinstance(done, wire.PutDone)
        assert (done.status, done.delivery_status, done.seq) == (
            Status.SUCCESS, Status.STORED, first_seq,
        )  # fmt: skip
    assert node.group.dqf.dedupe_waiters == 0
    assert node.group.status_info()["dqf_messages"] == 2  # one per key, nothing dead-lettered
    # once durable, a copy is answered from the journal: no bound applies
    sender.events.clear()
    node.group.put(sender, keyed_put(100))
    node.commit()
    assert only(sender.events, wire.PutDone).seq == first_seq


def test_a_peer_copy_beyond_the_bound_is_answered_link_down(node) -> None:
    answers: list[tuple[int, int]] = []

    def copy() -> Entry:
        return Entry(
            seq=7, body=b"from group 2", source=Address(2, 11), target=Address(1, 10),
            delivery=DeliveryMode.WF_DQF, uma=int(Uma.DISC), origin_group=2,
        )  # fmt: skip

    def outcome(status: Status, seq: int, reason: str) -> None:
        answers.append((int(status), seq))

    dqf = node.group.dqf
    for _ in range(1 + WAITERS_MAX):
        dqf.store_in_dqf(copy(), ["origin:2:7"], outcome)
    dqf.store_in_dqf(copy(), ["origin:2:7"], outcome)
    assert answers == [(int(Status.LINK_DOWN), 0)]  # the sender resends it from its SAF
    node.commit()
    assert answers[1:] == [(int(Status.STORED), 7)] * (1 + WAITERS_MAX)
    assert dqf.dedupe_waiters == 0
