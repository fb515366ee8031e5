"""`mrs jplay` without --until replays what the journal held when the run began, not
the records a live group adds while it runs."""

from __future__ import annotations

import time

from journals import Journal
from tests.journal_helpers import record
from tests.process.test_jplay import jplay

HOUR_NS = 3600 * 10**9


async def test_a_replay_without_until_stops_at_its_start(replay_bus) -> None:
    """Before: the selection had no end, so a replay of a live PCJ read on into the
    confirms made while it ran (new traffic re-sent to --to), and one whose PCJ grew
    faster than its --rate never ended. A record confirmed after the start stands
    here for those: its confirm time is an hour ahead of the run."""
    now_ns = time.time_ns()
    past = [record(i, confirm_time_ns=now_ns - HOUR_NS + i) for i in range(3)]
    later = record(3, confirm_time_ns=now_ns + HOUR_NS)
    bus = replay_bus({Journal.PCJ: [*past, later]})
    code, summary, err = await jplay(bus, "pcj", "--dry-run", "--json", "--to", "RESTORE")
    assert code == 0, err
    assert summary["would_send"] == 3, summary
    code, summary, err = await jplay(bus, "pcj", "--json", "--to", "RESTORE")
    assert code == 0 and summary["sent"] == 3, (err, summary)
    assert summary["later"] == 1, summary  # said, not silently left (a clock ahead, too)
    code, text, err = await jplay(bus, "pcj", "--to", "RESTORE")
    assert code == 0 and "left 1 dated after the run began" in err + text, (err, text)
    code, summary, err = await jplay(
        bus, "pcj", "--dry-run", "--json", "--to", "RESTORE", "--until", "2h"
    )
    assert code == 0 and summary["would_send"] == 0, (err, summary)  # --until still rules


async def test_a_refused_replay_says_its_record_stays(replay_bus) -> None:
    """Before: "failed seq N -> 1.77: NO_DQF UMA DISC: DISC_SUCCESS", which read as
    if the dead letter had been discarded; the UMA took the replay's copy."""
    bus = replay_bus({Journal.DLJ: [record(0, target_queue=77, reason=-228)]})
    code, summary, err = await jplay(bus, "dlj", "--json")
    assert code == 1, err
    (failure,) = summary["failures"]
    assert failure["message"].endswith("(of the replay's copy; the record stays in the dlj)")
