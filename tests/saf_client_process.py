"""A client process with a SAF journal, for crash tests (SIGKILL it at any point).

    python tests/saf_client_process.py ADDRESS JOURNAL COUNT [FREEZE_AT]

Attaches to SENDER with the journal, puts COUNT recoverable messages b"old<i>" to
ANYORDER (journaled if the server is down), prints "journaled", then prints
"drained <n>" as the journal drains (every 50 records) and "LINK_UP" at the end,
and waits to be killed.

With FREEZE_AT, the process prints "frozen <n>" when the FREEZE_AT-th record has
drained and then blocks its whole event loop on stdin: whatever the drain had under
way (puts sent and not answered, records stored and not yet deleted) stays exactly
so until the test kills it. Why: a kill timed by reading "drained <n>" raced the
rest of the drain, which on a loaded machine sometimes finished first.
"""

from __future__ import annotations

import sys

import trio

from clients import DeliveryMode, Reconnect, Status, connect


async def put(client, body: bytes) -> None:
    psb = await client.put(body, target="1.11", delivery=DeliveryMode.WF_DQF)
    assert psb.status == Status.JOURNAL_ON, psb


async def main(address: str, journal: str, count: int, freeze_at: int | None) -> None:
    drained = [0]

    def progress(event) -> None:
        if event.kind == "drained":
            drained[0] += 1
            if drained[0] % 50 == 0:
                print(f"drained {drained[0]}", flush=True)
            if drained[0] == freeze_at:
                print(f"frozen {freeze_at}", flush=True)
                sys.stdin.readline()  # blocks the loop until the test's SIGKILL

    reconnect = Reconnect(delay_s_initial=0.02, delay_s_max=0.2)
    async with connect(
        address, "SENDER", saf_journal=journal, reconnect=reconnect, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(progress)
        async with trio.open_nursery() as nursery:  # one group commit, not COUNT fsyncs
            for index in range(count):
                nursery.start_soon(put, client, b"old%d" % index)
        print("journaled", flush=True)
        await client.wait_journal_status(Status.LINK_UP)
        print("LINK_UP", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    freeze_at = int(sys.argv[4]) if len(sys.argv) > 4 else None
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), freeze_at)
