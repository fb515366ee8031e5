"""A WF_CONF put to another group's queue, sent straight over the link (link up, no
SAF backlog), times out and is re-sent under its idempotency key: the copy waits for
the receiver's confirm, as the first copy does and as a copy to a local queue does
(docs/timeouts-and-duplicates.md). In process, two groups joined by a LinkPair."""

from __future__ import annotations

from pathlib import Path

from mrs.model import Status
from tests.process.test_group_rooms import LinkPair
from tests.unit.test_duplicate_mrs_acks import confirm_on_group_2, put_done, wf_conf_put


def test_a_wf_conf_copy_sent_over_the_link_is_answered_at_the_receivers_confirm(
    tmp_path: Path,
) -> None:
    """The receiving group answered the copy STORED under the first copy's seq, and
    the sending group passed that on at once: the WF_CONF put returned before the
    receiver confirmed (the newcomer's probe: answered in 3 ms, the receiver got the
    message later). Now the copy joins the first copy's wait for the confirm notice;
    once confirmed, a further copy is answered at once."""
    pair = LinkPair(tmp_path)
    pair.connect()
    node = pair.nodes[1]
    sender = node.session("OUT")
    node.group.put(sender, wf_conf_put(1))
    pair.run()
    node.group.put(sender, wf_conf_put(2))  # the first timed out (or its answer was lost)
    pair.run()
    assert put_done(sender) == {}, "a WF_CONF copy answered before the receiver's confirm"
    (seq,) = confirm_on_group_2(pair, 1)
    answers = put_done(sender)
    assert sorted(answers) == [1, 2]
    for answer in answers.values():
        assert (answer.status, answer.delivery_status, answer.seq) == (
            Status.SUCCESS, Status.SUCCESS, seq,
        )  # fmt: skip
    node.group.put(sender, wf_conf_put(3))  # after the confirm: answered now
    pair.run()
    assert put_done(sender)[3].seq == seq
    pair.close()
