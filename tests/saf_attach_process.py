"""A client process that attaches with a SAF journal and says in one line how it
went, for the damaged-journal tests: a damaged journal may kill the process that
opens it (SIGBUS), and it must be this one, not pytest.

    python tests/saf_attach_process.py ADDRESS JOURNAL WAIT_S

Attaches to SENDER with JOURNAL and waits (at most WAIT_S) for the journal to drain:
prints "LINK_UP" (exit 0), "JOURNAL_FAIL <why>" (exit 0), "refused <error>" (exit 3)
when attach refuses the journal, or "stuck" (exit 4) when the journal neither
drained nor failed in WAIT_S.
"""

from __future__ import annotations

import sys

import trio

from clients import MrsError, Reconnect, Status, connect


async def main(address: str, journal: str, wait_s: float) -> int:
    reconnect = Reconnect(delay_s_initial=0.02, delay_s_max=0.2)
    try:
        async with connect(
            address, "SENDER", saf_journal=journal, reconnect=reconnect, connect_timeout_s=2
        ) as client:
            with trio.move_on_after(wait_s):
                try:
                    await client.wait_journal_status(Status.LINK_UP)
                except MrsError as failed:
                    print(f"JOURNAL_FAIL {failed}", flush=True)
                    return 0
                print("LINK_UP", flush=True)
                return 0
            print("stuck", flush=True)
            return 4
    except MrsError as refused:
        print(f"refused {refused}", flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3])))
