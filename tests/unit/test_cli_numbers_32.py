"""A length in seconds on the command line (`--seconds`, `--timeout`): refused with
the reason that fits, infinity as not finite (it was told "must be > 0")."""

from __future__ import annotations

import argparse

import pytest

from mrs.tools.cli_support import positive_float


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("inf", "must be a finite number > 0, got inf"),
        ("0", "must be a number > 0, got 0"),
        ("-5", "must be a number > 0, got -5"),
        ("nan", "must be a number > 0, got nan"),
        ("ten", "must be a number > 0, got 'ten'"),
    ],
)
def test_a_length_that_is_not_a_positive_finite_number_is_refused_for_its_reason(
    text: str, reason: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        positive_float(text)
    assert str(refused.value) == reason


def test_a_positive_length_is_taken() -> None:
    assert positive_float("2.5") == 2.5
