"""Under [auth], `mrs admin` does not tell a principal that may manage no queue which
queue names exist: a queue the group lacks is refused NOTAUTHORIZED to it, as one it
may not manage is (NOSUCHQUEUE was a yes/no answer per name tried). A principal with a
manage grant is still told NOSUCHQUEUE (tests/process/test_admin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from clients import NotAuthorized, connect
from tests.auth_helpers import SecureBus, creds


async def _browse(address: str, queue: str) -> None:
    async with connect(address, None, credentials=creds("consumer")) as client:
        await client.admin("browse", queue=queue)


def test_a_principal_without_manage_learns_nothing_of_unknown_queues(tmp_path: Path) -> None:
    secure = SecureBus(tmp_path / "secure", group_ids=(1,))
    secure.start()
    try:
        address = secure.address(1)
        refusals = []
        for queue in ("IN", "NOPE"):  # one that exists, one that does not
            with pytest.raises(NotAuthorized) as refused:
                trio.run(_browse, address, queue)
            refusals.append(str(refused.value).replace(queue, "Q"))
    finally:
        secure.stop()
    assert refusals[0] == refusals[1]  # the same words: nothing to tell them apart
