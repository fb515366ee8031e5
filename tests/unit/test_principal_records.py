"""The principal that put a message, kept by every record its group writes of it: the
DQF record, and the DLJ record when its UMA dead-letters it (issue 50). In process, the
real rooms over real LMDB journals (the helpers of tests/process/test_group_rooms.py);
the real-server test with [auth] on is tests/process/test_auth_principal.py."""

from __future__ import annotations

from journals import Journal
from mrs.group import KEPT
from mrs.model import DeliveryMode, Status, Uma
from tests.process.test_group_rooms import put
from tests.unit.test_broken_builds import open_group


def test_the_dqf_and_dlj_records_name_who_put_the_message(tmp_path) -> None:
    node = open_group(tmp_path, KEPT)
    producer = node.session("OUT")
    producer.principal = "producer"  # what the server's session holds with [auth] on
    for number in range(5):  # the group's dqf_messages_max
        node.group.put(producer, put("IN", b"%d" % number, DeliveryMode.WF_DQF, Uma.DLJ))
    node.commit()
    node.group.put(producer, put("IN", b"full", DeliveryMode.WF_DQF, Uma.DLJ, request_id=8))
    producer.principal = None  # auth off: nothing is kept
    node.group.put(producer, put("IN", b"anon", DeliveryMode.WF_DQF, Uma.DLJ, request_id=9))
    node.commit()
    refused = [event for event in producer.events if getattr(event, "request_id", 0) in (8, 9)]
    assert [event.delivery_status for event in refused] == [Status.DQF_FULL] * 2
    dqf = [record.extra.get("principal") for _, record in node.store.scan(Journal.DQF)]
    dlj = {record.body: record.extra.get("principal") for _, record in node.store.scan(Journal.DLJ)}
    assert dqf == ["producer"] * 5
    assert dlj == {b"full": "producer", b"anon": None}
    node.close()
