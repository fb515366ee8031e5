"""`mrs.tools.cli_support.run_guarded`, the last line of defence of every `mrs`
command: what an operator reads when a command fails in a way nothing else words."""

from __future__ import annotations

import pytest

from mrs.exit_status import EXIT_RUNTIME
from mrs.tools.cli_support import run_guarded


def _failing(error: BaseException):
    def run() -> int:
        raise error

    return run


def test_an_unexpected_error_a_trio_nursery_carried_is_named_not_its_group(capsys) -> None:
    """It said "unexpected error: ExceptionGroup: Exceptions from Trio nursery (1
    sub-exception)", which tells an operator nothing; the error inside is named."""
    carried = ExceptionGroup("Exceptions from Trio nursery", [RuntimeError("disk\non  fire")])
    assert run_guarded(_failing(carried)) == EXIT_RUNTIME
    said = capsys.readouterr().err
    assert said == (
        "mrs: unexpected error: RuntimeError: disk on fire (run with -v for the traceback)\n"
    )


@pytest.mark.parametrize(
    "interrupt", [KeyboardInterrupt(), BaseExceptionGroup("g", [KeyboardInterrupt()])]
)
def test_ctrl_c_is_130_and_silent(capsys, interrupt: BaseException) -> None:
    assert run_guarded(_failing(interrupt)) == 130
    assert capsys.readouterr().err == ""
