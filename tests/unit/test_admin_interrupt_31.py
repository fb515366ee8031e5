"""Ctrl-C during `mrs admin purge`/`move` says what the answered requests did."""

from __future__ import annotations

import pytest
import trio

from mrs.tools.admin import _repeat


class InterruptedAfterOne:
    """A group that answers one purge request of 500, then the operator hits Ctrl-C."""

    def __init__(self) -> None:
        self.asked = 0

    async def admin(self, action: str, **args) -> dict:
        self.asked += 1
        if self.asked > 1:
            raise KeyboardInterrupt
        return {"queue": "1.10", "dead_lettered": 500, "discarded": 0, "memory_discarded": 0,
                "left": 700}  # fmt: skip


def test_ctrl_c_mid_purge_says_what_was_purged(capsys) -> None:
    """Before: exit 130 and nothing said; 500 messages had gone to the DLJ."""
    with pytest.raises(KeyboardInterrupt):
        trio.run(_repeat, InterruptedAfterOne(), "purge", {"queue": "ORDERS"})
    said = capsys.readouterr().err
    assert said.count("\n") == 1, said
    assert "purge interrupted; done before that: purged 1.10: 500 to the DLJ" in said
    assert "the request under way may be done or not" in said
