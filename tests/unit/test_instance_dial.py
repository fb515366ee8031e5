"""A link to a replicated group tries its instances in turn (mrs.server.instance_dial):
one that takes the connection and never answers the link's handshake (a paused
process, another program on its port) is passed over at the next dial, instead of
being dialled forever while the active listens at another address."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import trio
import trio.testing

from mrs.config.instance_types import InstanceConfig
from mrs.group.link_driver import dial_forever
from mrs.server.instance_dial import InstancesNetwork

PORTS = {"a": 7101, "b": 7102, "c": 7103}


class SilentNetwork:
    """Every connection is taken and nothing is ever answered; the dials are noted."""

    def __init__(self) -> None:
        self.dialled: list[int] = []
        self.held: list[trio.abc.Stream] = []

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        self.dialled.append(port)
        ours, theirs = trio.testing.memory_stream_pair()
        self.held.append(theirs)
        return ours


async def _dials(count: int) -> list[int]:
    silent = SilentNetwork()
    instances = tuple(
        InstanceConfig(name, "127.0.0.1", port, "127.0.0.1", port + 100, Path(name))
        for name, port in PORTS.items()
    )
    network = InstancesNetwork(silent, instances)  # type: ignore[arg-type]
    link = SimpleNamespace(peer_id=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dial_forever, link, "127.0.0.1", 7101, 1, 1 << 20, network)
        while len(silent.dialled) < count:
            await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    return silent.dialled[:count]


def test_an_instance_that_never_answers_is_passed_over_at_the_next_dial() -> None:
    dialled = trio.run(_dials, 4, clock=trio.testing.MockClock(autojump_threshold=0))
    assert dialled == [7101, 7102, 7103, 7101]
