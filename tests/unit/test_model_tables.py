"""Each delivery mode's precomputed properties match the reference table."""

from __future__ import annotations

import pytest

from mrs.model import (
    RECOVERABLE_MODES,
    DeliveryMode,
    InterestPoint,
    Notification,
)

# name -> (recoverable, interest point), from reference/messageq-constants.md
REFERENCE = {
    "WF_SAF": (True, "SAF"),
    "WF_DQF": (True, "DQF"),
    "WF_MEM": (False, "MEM"),
    "AK_SAF": (True, "SAF"),
    "AK_DQF": (True, "DQF"),
    "AK_MEM": (False, "MEM"),
    "NN_SAF": (True, "SAF"),
    "NN_DQF": (True, "DQF"),
    "NN_MEM": (False, "MEM"),
    "WF_DEQ": (False, "DEQ"),
    "AK_DEQ": (False, "DEQ"),
    "WF_CONF": (True, "CONF"),
    "AK_CONF": (True, "CONF"),
    "WF_ACK": (False, "ACK"),
    "AK_ACK": (False, "ACK"),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_mode_properties_are_members_of_their_enums(name: str) -> None:
    recoverable, point = REFERENCE[name]
    mode = DeliveryMode[name]
    assert mode.interest_point is InterestPoint(point)
    assert mode.notification is Notification(name.split("_")[0])
    assert mode.recoverable is recoverable
    assert mode.waits_for_receiver is (point in ("CONF", "DEQ", "ACK"))
    assert (mode in RECOVERABLE_MODES) is recoverable


def test_every_mode_is_in_the_reference_and_the_other_way_round() -> None:
    assert {mode.name for mode in DeliveryMode} == set(REFERENCE)


def test_a_mode_survives_a_round_trip_through_its_number() -> None:
    """The wire carries the number; the decoded member has the same tables."""
    for mode in DeliveryMode:
        again = DeliveryMode(int(mode))
        assert again.interest_point is mode.interest_point
        assert again.notification is mode.notification
