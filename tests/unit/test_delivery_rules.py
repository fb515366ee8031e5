"""The pure delivery rules against tables written from reference/messageq-constants.md.

The expectations here are spelled out independently of `mrs.core.delivery`: a table of the
15 modes and the UMA rules as the reference states them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrs.core.delivery import (
    Refused,
    check_confirm,
    check_mode_and_uma,
    delivery_status_on_get,
    journal_on_confirm,
    reached_status,
    uma_status,
)
from mrs.model import MRS_ACK_TYPE, MRS_CLASS, ConfirmStyle, DeliveryMode, ForceJrn, Status, Uma

# name: (value, recoverable, interest point) -- the reference's delivery mode table
MODES = {
    "WF_SAF": (25, True, "SAF"),
    "WF_DQF": (26, True, "DQF"),
    "WF_MEM": (29, False, "MEM"),
    "AK_SAF": (30, True, "SAF"),
    "AK_DQF": (31, True, "DQF"),
    "AK_MEM": (34, False, "MEM"),
    "NN_SAF": (35, True, "SAF"),
    "NN_DQF": (36, True, "DQF"),
    "NN_MEM": (39, False, "MEM"),
    "WF_DEQ": (40, False, "DEQ"),
    "AK_DEQ": (41, False, "DEQ"),
    "WF_CONF": (42, True, "CONF"),
    "AK_CONF": (43, True, "CONF"),
    "WF_ACK": (44, False, "ACK"),
    "AK_ACK": (45, False, "ACK"),
}
MODE_VALUES = {value: name for name, (value, _, _) in MODES.items()}
RECOVERABLE_VALUES = {value for value, recoverable, _ in MODES.values() if recoverable}
SAF_POINT_VALUES = {25, 30, 35}
UMAS = {"RTS": 1, "DLJ": 2, "DLQ": 3, "SAF": 4, "DISC": 5, "DISCL": 6}
UMA_DLJ, UMA_SAF, UMA_DISC = 2, 4, 5

UMA_SUCCESS_VALUES = {
    "DISC": 11,
    "DISCL": 13,
    "DLJ": 15,
    "DLQ": 17,
    "RTS": 19,
    "SAF": 21,
}
UMA_FAILURE_NAMES = {
    "DISC": "DISC_FAILED",
    "DISCL": "DISCL_FAILED",
    "DLJ": "DLJ_FAILED",
    "DLQ": "DLQ_FAILED",
    "RTS": "RTS_FAIL",
    "SAF": "SAF_FAILED",
}

REFERENCE_STATUSES = {
    "SUCCESS": 1,
    "LINK_UP": 3,
    "JOURNAL_ON": 5,
    "NOMOREMSG": 7,
    "DISC_SUCCESS": 11,
    "DISCL_SUCCESS": 13,
    "DLJ_SUCCESS": 15,
    "DLQ_SUCCESS": 17,
    "RTS_SUCCESS": 19,
    "SAF_SUCCESS": 21,
    "NO_UMA": 25,
    "UMA_NA": 27,
    "STORED": 31,
    "ENQUEUED": 33,
    "UNATTACHEDQ": 35,
    "CONFIRMREQ": 37,
    "SAF_FORCED": 43,
    "TIMEOUT": -14,
    "ACKTMO": -16,
    "MSGUNDEL": -18,
    "NOTACTIVE": -54,
    "EXCEEDQUOTA": -56,
    "BADDELIVERY": -60,
    "POSSDUPL": -158,
    "EXCMAXUNCONF": -170,
    "NOMRS": -188,
    "DQF_FULL": -202,
    "LINK_DOWN": -206,
    "BADSEQ": -208,
    "NOTJRN": -210,
    "MRS_RES_EXH": -212,
    "NOSUCHPCJ": -218,
    "BADUMA": -222,
    "NO_DQF": -228,
    "NO_SAF": -230,
    "SAF_DEVICE_FAIL": -234,
    "NOTSUPPORTED": -268,
    "JOURNAL_FULL": -284,
    "JOURNAL_FAIL": -286,
}


def expected_check(delivery: int, uma: int) -> tuple[str, int] | tuple[str, int, int]:
    """('ok', mode value, uma value) or ('refused', status value), from the reference."""
    if delivery not in MODE_VALUES:
        return ("refused", -60)  # BADDELIVERY
    recoverable = delivery in RECOVERABLE_VALUES
    if uma == 0:  # not given: only a nonrecoverable message may go without a UMA
        return ("refused", -222) if recoverable else ("ok", delivery, UMA_DISC)
    if uma not in UMAS.values():
        return ("refused", -222)  # BADUMA
    if uma in (UMA_DLJ, UMA_SAF) and not recoverable:
        return ("refused", -268)  # NOTSUPPORTED
    if uma == UMA_SAF and delivery in SAF_POINT_VALUES:
        return ("refused", -268)
    return ("ok", delivery, uma)


def actual_check(delivery: int, uma: int):
    try:
        mode, action = check_mode_and_uma(delivery, uma)
    except Refused as refused:
        assert refused.message
        return ("refused", int(refused.status))
    assert isinstance(mode, DeliveryMode) and isinstance(action, Uma)
    return ("ok", int(mode), int(action))


def test_every_mode_uma_pair_in_and_around_the_valid_ranges():
    for delivery in range(-3, 60):
        for uma in range(-3, 10):
            assert actual_check(delivery, uma) == expected_check(delivery, uma), (delivery, uma)


ANY_DELIVERY = st.sampled_from(sorted(MODE_VALUES)) | st.integers(-(2**63), 2**63 - 1)
ANY_UMA = st.integers(0, 6) | st.integers(-(2**63), 2**63 - 1)


@given(ANY_DELIVERY, ANY_UMA)
def test_check_mode_and_uma_for_any_integers(delivery, uma):
    assert actual_check(delivery, uma) == expected_check(delivery, uma)


def test_notsupported_pairs_are_exactly_the_reference_exclusions():
    refused = {
        (mode.name, uma.name)
        for mode in DeliveryMode
        for uma in Uma
        if actual_check(int(mode), int(uma)) == ("refused", -268)
    }
    nonrecoverable = ["WF_MEM", "AK_MEM", "NN_MEM", "WF_DEQ", "AK_DEQ", "WF_ACK", "AK_ACK"]
    expected = {(mode, uma) for mode in nonrecoverable for uma in ("DLJ", "SAF")}
    expected |= {(mode, "SAF") for mode in ("WF_SAF", "AK_SAF", "NN_SAF")}
    assert refused == expected


# ----------------------------------------------------------------- the vocabulary


def test_delivery_modes_are_the_fifteen_of_the_reference():
    assert {mode.name: int(mode) for mode in DeliveryMode} == {
        name: value for name, (value, _, _) in MODES.items()
    }


@pytest.mark.parametrize("name", sorted(MODES))
def test_delivery_mode_properties(name):
    value, recoverable, point = MODES[name]
    mode = DeliveryMode(value)
    assert mode.recoverable is recoverable
    assert mode.interest_point == point
    assert mode.notification == name[:2]
    assert mode.notification in ("WF", "AK", "NN")


def test_there_is_no_nn_deq_conf_or_ack():
    for mode in DeliveryMode:
        if mode.notification == "NN":
            assert mode.interest_point in ("SAF", "DQF", "MEM")


def test_uma_force_j_and_mrs_constants_match_the_reference():
    assert {uma.name: int(uma) for uma in Uma} == UMAS
    assert {choice.name: int(choice) for choice in ForceJrn} == {
        "DEFAULT_JRN": 0,
        "FORCE_JRN": 1,
        "NO_JRN": 2,
    }
    assert (MRS_CLASS, MRS_ACK_TYPE) == (28, -801)


def test_status_values_match_the_reference_and_never_collide():
    for name, value in REFERENCE_STATUSES.items():
        assert Status[name] == value, name
    values = [int(member) for member in Status.__members__.values()]
    assert len(values) == len(set(values)), "two status names share a value (an alias)"
    for member in Status:
        assert member.ok is (member.value > 0)


# ----------------------------------------------------------------- outcome statuses


@pytest.mark.parametrize("name", sorted(MODES))
@pytest.mark.parametrize("attached", [True, False])
def test_reached_status(name, attached):
    point = MODES[name][2]
    expected = {
        "SAF": Status.STORED,
        "DQF": Status.STORED,
        "MEM": Status.ENQUEUED if attached else Status.UNATTACHEDQ,
        "DEQ": Status.SUCCESS,
        "ACK": Status.SUCCESS,
        "CONF": Status.SUCCESS,
    }[point]
    status = reached_status(DeliveryMode[name], target_attached=attached)
    assert status == expected
    # every reached status is one the reference calls "delivered to the interest point"
    assert status in (Status.ENQUEUED, Status.STORED, Status.SUCCESS, Status.UNATTACHEDQ)


@pytest.mark.parametrize("name", sorted(UMAS))
def test_uma_status(name):
    action = Uma[name]
    assert uma_status(action, succeeded=True) == UMA_SUCCESS_VALUES[name]
    failed = uma_status(action, succeeded=False)
    assert failed.name == UMA_FAILURE_NAMES[name]
    assert failed < 0 and not failed.ok


def test_uma_failure_statuses_are_distinct():
    failures = {uma_status(action, succeeded=False) for action in Uma}
    assert len(failures) == len(Uma)


@given(st.integers(0, 10**6))
def test_delivery_status_on_get(times_before):
    assert delivery_status_on_get(False, times_before) == Status.SUCCESS
    expected = Status.CONFIRMREQ if times_before == 0 else Status.POSSDUPL
    assert delivery_status_on_get(True, times_before) == expected


def test_confirmreq_and_possdupl_values():
    assert delivery_status_on_get(True, 0) == 37
    assert delivery_status_on_get(True, 1) == -158


@pytest.mark.parametrize(
    ("force_j", "pcj_default", "journaled"),
    [
        (0, True, True),
        (0, False, False),
        (1, True, True),
        (1, False, True),
        (2, True, False),
        (2, False, False),
    ],
)
def test_journal_on_confirm(force_j, pcj_default, journaled):
    assert journal_on_confirm(force_j, pcj_default) is journaled


@given(st.integers().filter(lambda v: v not in (0, 1, 2)), st.booleans())
def test_journal_on_confirm_refuses_other_values(force_j, pcj_default):
    with pytest.raises(Refused) as caught:
        journal_on_confirm(force_j, pcj_default)
    assert caught.value.status == Status.BADPARAM


# ----------------------------------------------------------------- confirmation order

UNCONFIRMED = {30: "c", 10: "a", 20: "b"}  # delivery order: 30 first


@pytest.mark.parametrize("style", list(ConfirmStyle))
@pytest.mark.parametrize("seq", [0, 11, 31, 2**64 - 1])
def test_unknown_seq_is_badseq_for_every_style(style, seq):
    for unconfirmed in (UNCONFIRMED, {}):
        with pytest.raises(Refused) as caught:
            check_confirm(style, unconfirmed, seq)
        assert caught.value.status == Status.BADSEQ
        # the application is told what to do: confirm the copy that comes again
        assert str(seq) in caught.value.message and "POSSDUPL" in caught.value.message


@pytest.mark.parametrize("style", [ConfirmStyle.IMPLICIT, ConfirmStyle.EXPLICIT_OUT_OF_ORDER])
def test_any_unconfirmed_seq_may_be_confirmed_out_of_order(style):
    for seq in UNCONFIRMED:
        check_confirm(style, UNCONFIRMED, seq)


def test_in_order_queue_accepts_only_the_oldest_delivered():
    check_confirm(ConfirmStyle.EXPLICIT_IN_ORDER, UNCONFIRMED, 30)
    for seq in (10, 20):
        with pytest.raises(Refused) as caught:
            check_confirm(ConfirmStyle.EXPLICIT_IN_ORDER, UNCONFIRMED, seq)
        assert caught.value.status == Status.BADSEQ
        assert "30" in caught.value.message


def test_a_forged_mrs_ack_is_one_clear_error_not_a_type_error() -> None:
    """Any application may put class 28 / type -801 (MRS_ACK's): reading its PSB raised
    `TypeError: cannot unpack non-iterable int object`."""
    import msgpack

    from mrs.model import Address, Message

    forged = Message(msgpack.packb(7), 5, Address(1, 12), Address(1, 11), MRS_CLASS, MRS_ACK_TYPE)
    assert not forged.is_mrs_ack  # from an application's queue: only a group sends from .0
    with pytest.raises(ValueError, match="an application put it, not the MRS"):
        forged.ack_psb()
    # A well-formed PSB from an application's queue was taken for the group's word on
    # a put (a forged SUCCESS): refused by its source, not only by its shape.
    for body in (["a", "b", 1, 2], [0, 0, 1.5, 0], [1, 2, -3, 4], [1, 1, 3, 1]):
        shaped = Message(msgpack.packb(body), 5, Address(1, 12), Address(1, 11), MRS_CLASS,
                         MRS_ACK_TYPE)  # fmt: skip
        assert not shaped.is_mrs_ack
        with pytest.raises(ValueError, match="an application put it"):
            shaped.ack_psb()
    for body in (["a", "b", 1, 2], [0, 0, 1.5, 0], [1, 2, -3, 4]):  # from .0, not a PSB
        odd = Message(msgpack.packb(body), 5, Address(1, 0), Address(1, 11), MRS_CLASS,
                      MRS_ACK_TYPE)  # fmt: skip
        with pytest.raises(ValueError, match="an application put it"):
            odd.ack_psb()
    real = Message(msgpack.packb([1, 2, 3, 4]), 5, Address(1, 0), Address(1, 11), MRS_CLASS,
                   MRS_ACK_TYPE)  # fmt: skip
    assert real.ack_psb().seq == 3
