"""The checker's rules as properties: a history a correct server could produce always
passes, and each kind of broken behaviour grafted onto it is always reported."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from mrs.model import DeliveryMode, Status, Uma
from sim.checker import History, Sent, check

QUEUE = "2.10"
CONFIRMREQ, POSSDUPL = int(Status.CONFIRMREQ), int(Status.POSSDUPL)


@dataclass(frozen=True)
class Fate:
    """What happens to one message on a correct in-order queue."""

    lost_get_first: bool  # its first delivery's answer was lost (the get saw nothing)
    walk_away: bool  # the consumer left with it unconfirmed once


fates = st.lists(st.builds(Fate, st.booleans(), st.booleans()), min_size=1, max_size=12)


def correct_history(messages: list[Fate]) -> History:
    """FIFO delivery as the contract says: CONFIRMREQ first, POSSDUPL for every
    redelivery, a walked-away message back first, every message confirmed once."""
    history = History(in_order_queues={QUEUE})
    for counter in range(len(messages)):
        message_id = f"1.20:{counter}"
        history.record_send(
            Sent(message_id, "1.20", QUEUE, int(DeliveryMode.WF_DQF), int(Uma.SAF), True)
        )
        history.record_outcome(message_id, int(Status.STORED), int(Status.NO_UMA), counter + 1)
    for counter, fate in enumerate(messages):
        message_id = f"1.20:{counter}"
        redelivery = False
        if fate.lost_get_first:
            history.record_lost_get(QUEUE)  # delivered, never seen: comes back marked
            redelivery = True
        if fate.walk_away:
            history.record_delivery(message_id, QUEUE, POSSDUPL if redelivery else CONFIRMREQ)
            history.record_walk_away(QUEUE, message_id)
            redelivery = True
        history.record_delivery(message_id, QUEUE, POSSDUPL if redelivery else CONFIRMREQ)
        history.record_confirm(message_id, QUEUE)
    return history


@given(fates)
def test_a_correct_history_passes(messages: list[Fate]) -> None:
    verdict = check(correct_history(messages))
    assert verdict.ok, verdict.counts()
    assert verdict.delivered == verdict.acknowledged == len(messages)


@given(fates, st.data())
def test_a_first_delivery_marked_without_a_lost_get_is_reported(messages, data) -> None:
    history = correct_history(messages)
    firsts = [
        position
        for position, (message_id, _, status) in enumerate(history.deliveries)
        if status == CONFIRMREQ
    ]
    if not firsts:
        return  # every first delivery was already explained by a lost get
    position = data.draw(st.sampled_from(firsts))
    message_id, queue, _ = history.deliveries[position]
    history.deliveries[position] = (message_id, queue, POSSDUPL)
    assert check(history).marked_first_deliveries


@given(fates, st.data())
def test_a_redelivery_after_its_confirm_is_reported(messages, data) -> None:
    history = correct_history(messages)
    message_id = data.draw(st.sampled_from(sorted({d[0] for d in history.deliveries})))
    history.record_delivery(message_id, QUEUE, POSSDUPL)
    assert check(history).redelivered_after_confirm == [message_id]


@given(fates, st.data())
def test_an_unconfirmed_message_that_never_comes_back_is_reported(messages, data) -> None:
    history = correct_history(messages)
    walked = [message_id for _, message_id, _ in history.walk_aways]
    if not walked:
        return
    message_id = data.draw(st.sampled_from(walked))
    # the broken server forgets it: only its first delivery, no redelivery, no confirm
    first = next(d for d in history.deliveries if d[0] == message_id)
    history.deliveries = [d for d in history.deliveries if d[0] != message_id or d is first]
    history.confirms = [c for c in history.confirms if c[0] != message_id]
    assert check(history).unconfirmed_lost


@given(fates, st.data())
def test_a_message_left_in_a_journal_is_reported(messages, data) -> None:
    history = correct_history(messages)
    message_id = data.draw(st.sampled_from(sorted(history.sent)))
    history.leftovers["g2 DQF"] = [message_id]
    assert check(history).stuck == [f"g2 DQF: {message_id}"]
