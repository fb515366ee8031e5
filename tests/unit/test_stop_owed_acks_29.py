"""A SIGTERMed active whose hand-over is refused after it recorded the MRS_ACKs it
owed says they are in its journals for the next active, not that they are lost.

Before: its one WARNING counted them among what goes with its memory, though the
record stays for the next active (`Active._refused_after_settling` keeps it for a
planned stop), and an operator reading it would tell the senders to re-send."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from journals import JournalStore
from mrs.replication.active import HANDOVER_ACKS_KEY
from mrs.replication.coordinator import FailoverRequest, MemoryCoordinator, MemoryElection
from tests.conftest import run_under_autojump_clock
from tests.unit.test_planned_handover import acknowledge_as_sealed, active_a_with_b_and_c_in_sync

OWED = [(1, 200, b"ack 1"), (1, 200, b"ack 2")]


class Owing:
    """The active's server, owing two MRS_ACKs to an AK sender."""

    paused = False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def commit_now(self) -> None:
        pass

    def owed_acks(self) -> list[tuple[int, int, bytes]]:
        return list(OWED)

    def serves_clients(self) -> bool:
        return False  # the MRS_ACKs owed alone make it hand over

    async def written(self) -> None:
        pass


class RefusingSync(MemoryCoordinator):
    """etcd refuses the hand-over's in-sync record (a compare that failed)."""

    async def set_in_sync(
        self,
        term: int,
        members: tuple[str, ...],
        acks_needed: int,
        request: FailoverRequest | None = None,
    ) -> bool:
        return False


@pytest.fixture
def store(tmp_path: Path):
    opened = JournalStore(tmp_path / "journals", 1 << 24)
    yield opened
    opened.close()


def test_owed_acks_recorded_before_a_refused_stop_are_not_said_lost(
    store: JournalStore, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        election = MemoryElection()
        active = await active_a_with_b_and_c_in_sync(store, election, [])
        active.coordinator = RefusingSync(election, "a")
        active.coordinator.term = active.term
        active.server = Owing()
        active.connected.update({"b", "c"})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acknowledge_as_sealed, active, "b")
            nursery.start_soon(acknowledge_as_sealed, active, "c")
            with caplog.at_level(logging.WARNING, logger="mrs.replication"):
                await active.stop_handing_over()
            nursery.cancel_scope.cancel()
        assert store.meta_get(HANDOVER_ACKS_KEY) is not None  # kept for the next active
        [said] = [r.getMessage() for r in caplog.records if "stops without" in r.getMessage()]
        assert "2 MRS_ACK(s) its senders had not got are in its journals" in said, said
        assert active.resigned and not active.stream.answering

    run_under_autojump_clock(scenario)
