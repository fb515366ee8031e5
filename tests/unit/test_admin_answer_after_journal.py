"""An operator's purge or move on a replicated group is answered only once its admin
journal line (who did it, what it did) is on a majority too, like the action's own
commits. Before, the answer went out before the line's commit: a SIGKILL of the active
right after it left the next active with the messages purged or moved and no line
saying who did it. In process: real LMDB journals, the production ReplicatedWriter,
and a replica that acknowledges only when the test says."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mrs import protocol as wire
from mrs.model import DeliveryMode
from mrs.ops.admin_actions import AdminActions
from tests.process.test_group_rooms import Node, only, open_node, put


@dataclass(eq=False)
class Operator:
    principal: str | None = "ops"
    peer: str = "127.0.0.1:1"
    events: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.events.append(event)


@dataclass(eq=False)
class Server:
    """What the admin actions read of a server: the group, no [auth]."""

    node: Node
    authority: None = None
    gate: None = None
    sessions: tuple = ()

    @property
    def group(self):
        return self.node.group

    @property
    def config(self):
        return self.node.group.config

    @property
    def bus(self):
        return self.node.group.bus


@pytest.fixture
def node(tmp_path: Path):
    opened = open_node(tmp_path, 1, dqf_messages_max=100, replicated=True)
    sender = opened.session("OUT")
    for number in range(3):
        opened.group.put(
            sender, put("IN", b"%d" % number, DeliveryMode.WF_DQF, request_id=number + 1)
        )
    opened.commit()
    yield opened
    opened.close()


@pytest.mark.parametrize(
    "action, args",
    [("purge", {"queue": "IN"}), ("move", {"queue": "IN", "to": "OUT"})],
)
def test_the_answer_waits_for_the_journal_lines_majority(node: Node, action, args) -> None:
    actions, operator = AdminActions(Server(node)), Operator()
    actions(operator, wire.AdminRequest(request_id=1, action=action, args=args))
    node.writer.commit_pending()  # the action's own commit(s)
    node.replica_acks()  # ... on a majority: the journal line is submitted
    assert operator.events == []
    node.writer.commit_pending()  # the line's commit, on the active's disk alone
    assert operator.events == []  # before: answered here
    node.replica_acks()
    reply = only(operator.events, wire.AdminReply)
    assert reply.result.get("journaled", True) is True
    journaled = actions.read_journal(5)
    assert [(line["action"], line["principal"]) for line in journaled] == [(action, "ops")]
    assert journaled[0]["result"] == {k: v for k, v in reply.result.items() if k != "journaled"}
