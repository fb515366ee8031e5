"""The client's cheap request building (clients.requests) refuses and accepts exactly
what the generic field check does: for any arguments, the request it builds equals
the checked construction's, and it raises FieldRefused (BADPARAM) exactly when that
construction refuses a field — the fast path may only skip checks it can prove."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients import FieldRefused, NotSupported
from clients.requests import confirm_request, get_request, put_request
from mrs import protocol as wire
from mrs.model import DeliveryMode, ForceJrn, Status, Uma

EDGE_INTS = st.sampled_from([0, 1, -1, 99, 100, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64])
ANY_INT = st.one_of(st.just(0), EDGE_INTS, st.integers(-(2**65), 2**65))
ODD = st.sampled_from([0.0, False, True, None, "0", b"", 1.5])
"""Values of the wrong type that compare equal to a default or look like one."""


def _outcome(build: Any, *fields: Any) -> Any:
    try:
        return build(*fields)
    except wire.LocalProtocolError:
        return "refused"
    except FieldRefused as refused:
        assert refused.status is Status.BADPARAM
        return "refused"
    except NotSupported as refused:  # a mode or UMA beyond int32 names none (session 33)
        assert refused.status in (Status.BADDELIVERY, Status.BADUMA)
        return "refused"


@given(
    delivery=st.one_of(st.sampled_from(list(DeliveryMode)), ANY_INT),
    uma=st.one_of(st.sampled_from(list(Uma)), st.just(0), ANY_INT),
    msg_class=st.one_of(ANY_INT, ODD),
    msg_type=st.one_of(st.just(0), ANY_INT, ODD),
    priority=st.one_of(st.just(0), ANY_INT, ODD),
    timeout_ms=st.one_of(st.just(0), ANY_INT, ODD),
    correlation_id=st.one_of(st.just(b""), st.binary(max_size=40), ODD),
    resp_q=st.sampled_from(["", "1.20", "REPLIES"]),
    headers=st.one_of(st.none(), st.just({}), st.just({"k": 1}), st.just({"t": 1.5j})),
)
def test_a_put_is_built_as_the_checked_construction_builds_it(
    delivery, uma, msg_class, msg_type, priority, timeout_ms, correlation_id, resp_q, headers
) -> None:
    fields = (msg_class, msg_type, priority, timeout_ms, correlation_id, resp_q, headers)
    expected = _outcome(wire.Put, 7, "1.10", b"body", int(delivery), int(uma), *fields)
    got = _outcome(put_request, 7, "1.10", b"body", delivery, uma, *fields)
    assert got == expected


@given(st.one_of(ANY_INT, ODD))
def test_a_get_is_built_as_the_checked_construction_builds_it(timeout_ms) -> None:
    assert _outcome(get_request, 3, timeout_ms) == _outcome(wire.Get, 3, timeout_ms)


@given(
    seq=st.one_of(ANY_INT, ODD),
    confirm_value=st.one_of(st.just(0), ANY_INT, ODD),
    force_j=st.sampled_from(list(ForceJrn)),
)
def test_a_confirm_is_built_as_the_checked_construction_builds_it(
    seq, confirm_value, force_j
) -> None:
    expected = _outcome(wire.Confirm, 5, seq, confirm_value, int(force_j))
    assert _outcome(confirm_request, 5, seq, confirm_value, force_j) == expected


def test_the_fast_path_is_taken_for_a_plain_put(monkeypatch) -> None:
    """Common puts, with headers or not, really skip the generic check (else this work
    was for nothing)."""
    calls = []
    original = wire.Put._all_ok

    def counting(event: Any) -> bool:
        calls.append(event)
        return original(event)

    monkeypatch.setattr(wire.Put, "_all_ok", staticmethod(counting))
    put_request(1, "1.10", b"x", DeliveryMode.WF_DQF, Uma.DLJ, 0, 0, 0, 0, b"", "", None)
    replayed = {"replay": {"journal": "pcj", "seq": 7}, "idempotency_key": "replay:a:7:b"}
    put_request(1, "1.10", b"x", DeliveryMode.WF_DQF, 0, 3, 4, 5, 250, b"c-1", "1.20", replayed)
    assert calls == []
    with pytest.raises(FieldRefused):  # free-form headers are still looked into
        put_request(1, "1.10", b"x", DeliveryMode.WF_DQF, 0, 0, 0, 0, 0, b"", "", {"t": 1.5j})
    with pytest.raises(FieldRefused):
        put_request(1, "1.10", b"x", DeliveryMode.WF_DQF, Uma.DLJ, 0, 0, 120, 0, b"", "", None)
    assert len(calls) == 1
