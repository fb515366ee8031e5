"""`mrs status` keeps a queue's counts readable beside the longest name a queue may
have (127 characters): the Name column folds. Before, every column shrank to fit 80
columns and the depth read `30…`."""

from __future__ import annotations

import trio

from clients import DeliveryMode
from mrs.config.schema import NAME_CHARS_MAX
from tests.cli_helpers import run_mrs

LONG = "Q" * NAME_CHARS_MAX


def test_a_queue_with_the_longest_name_shows_its_depth_whole(make_bus) -> None:
    bus = make_bus(queues=f'[[group.queue]]\nid = 10\nname = "{LONG}"\n')

    async def put_many() -> None:
        async with bus.connect("1.10") as client:
            for _ in range(305):
                await client.put(b"x", target="1.10", delivery=DeliveryMode.NN_MEM)

    trio.run(put_many)
    result = run_mrs("status", "--address", bus.address, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.lstrip().startswith("1.10")]
    assert len(rows) == 1 and " 305 " in f"{rows[0]} ", result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
