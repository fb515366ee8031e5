"""The compiled field test of each event (mrs.protocol.fastcheck) agrees with the field
rules it replaces on the fast path (checks.validate): it accepts exactly the events
`validate` accepts, so no event the rules refuse gets built and none they allow is
refused. Property-tested over every event class with values of every kind."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrs import protocol as wire
from mrs.model import Status
from mrs.protocol.checks import DECODE_STATE, OneOfCheck, validate
from mrs.protocol.errors import LocalProtocolError
from mrs.protocol.events import CLIENT_EVENTS, SERVER_EVENTS

CLASSES = sorted(set(CLIENT_EVENTS + SERVER_EVENTS), key=lambda cls: cls.code)

_edges = st.sampled_from([0, 1, 99, 100, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63])
_ints = st.one_of(_edges, st.integers(-(2**65), 2**65), st.integers(-5, 200))
_values = st.one_of(
    _ints,
    st.booleans(),
    st.sampled_from(list(Status)),
    st.text(max_size=4),
    st.binary(max_size=40),
    st.none(),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2),
    st.floats(allow_nan=False),
)


def _field_values(cls: type) -> st.SearchStrategy[list]:
    fields = []
    for _name, _ok, check in cls._rules:
        if isinstance(check, OneOfCheck):
            fields.append(st.one_of(st.sampled_from(check.choices), _values))
        else:
            fields.append(_values)
    return st.tuples(*fields).map(list)


def _unchecked(cls: type, values: list):
    """An event built as a decoded frame is (only its free-form fields checked). None
    when no decoder would let the values through: a refused free-form field, or a list
    of events holding something else (msgspec checks those lists itself, so a
    PutBatch's own count of its bodies meets a non-Put only here)."""
    DECODE_STATE.decoding = True
    try:
        return cls(*values)
    except (LocalProtocolError, TypeError, AttributeError):
        return None
    finally:
        DECODE_STATE.decoding = False


def _validate_accepts(event) -> bool:
    try:
        validate(event, type(event)._rules)
    except LocalProtocolError:
        return False
    return True


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_test_accepts_exactly_what_validate_accepts(cls: type, data) -> None:
    event = _unchecked(cls, data.draw(_field_values(cls)))
    if event is None:
        return  # a free-form field no decoder would let through either
    assert cls._all_ok(event) == _validate_accepts(event)


def test_a_refused_field_is_still_named_and_worded() -> None:
    with pytest.raises(LocalProtocolError, match=r"Confirmed.status must be an int, got bool"):
        wire.Confirmed(1, 2, True)
    with pytest.raises(LocalProtocolError, match=r"Delivery.priority must be 0..99, got 120"):
        wire.Delivery(1, 2, b"", "1.1", "1.2", 0, 0, 120, 20, 0, b"", 0, None)
    assert wire.PutDone(1, Status.SUCCESS, Status.STORED, 5, Status.NO_UMA).seq == 5
