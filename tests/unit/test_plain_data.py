"""The plain-data check of free-form fields (headers, info): the fast recursive walk
accepts and refuses exactly what the plain stack walk it replaced did."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.protocol.checks import INT64, NEST_MAX, UINT64_MAX, plain_data_problem

_SCALARS = (bool, str, bytes, float, type(None))


def reference_problem(root: dict) -> str | None:
    """The walk as it was before it was made fast: every item through one stack."""
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _SCALARS):
            continue
        if isinstance(item, int):
            if not INT64[0] <= item <= UINT64_MAX:
                return f"holds an int out of msgpack range: {item}"
            continue
        if depth >= NEST_MAX:
            return f"is nested deeper than {NEST_MAX} levels"
        if isinstance(item, dict):
            for key, val in item.items():
                if not isinstance(key, (int, *_SCALARS)):
                    return f"holds a key of type {type(key).__name__}"
                stack.append((key, depth + 1))
                stack.append((val, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((x, depth + 1) for x in item)
        else:
            return f"holds a value of type {type(item).__name__}"
    return None


_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**65)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5)
    | st.sampled_from([object(), {1, 2}, 1j])
)
_keys = st.text(max_size=3) | st.integers(-(2**64), 2**65) | st.sampled_from([(1, 2), None, b"k"])
_data = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_keys, _data, max_size=5))
def test_the_fast_walk_refuses_exactly_what_the_reference_refuses(root: dict) -> None:
    fast, reference = plain_data_problem(root), reference_problem(root)
    assert (fast is None) == (reference is None), (fast, reference)


def test_depth_is_counted_the_same_way() -> None:
    for depth in (NEST_MAX - 2, NEST_MAX - 1, NEST_MAX, NEST_MAX + 1):
        root: dict = {}
        inner = root
        for _ in range(depth):
            inner["x"] = {}
            inner = inner["x"]
        assert plain_data_problem(root) == reference_problem(root), depth
