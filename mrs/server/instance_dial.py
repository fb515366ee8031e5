"""A link to a replicated group dials whichever of its instances is active.

Why a network wrapper: the link driver (mrs.group.link_driver) dials one host:port
and retries with backoff; a replicated peer has three addresses and only its active
listens. Wrapping the network's `connect` so that each attempt tries the instances in
turn, from the one that answered last, keeps the driver as it is: after a failover
the link's next redial finds the new active, and the link's own resync (SAF drain
from the peer's last seq) does the rest.
"""

from __future__ import annotations

from typing import Any

import trio

from mrs.config.instance_types import InstanceConfig
from mrs.transport.network import Network


class InstancesNetwork:
    """`network`, with `connect` going to the first instance that takes it."""

    def __init__(self, network: Network, instances: tuple[InstanceConfig, ...]) -> None:
        self.network = network
        self.addresses = [(i.listen_host, i.listen_port) for i in instances]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.network, name)

    def pass_over(self) -> None:
        """The instance that took the last connection did not answer the link's
        handshake (a paused process, another program on its port): the next dial
        starts at the next one. Without it the link dialled that one forever, since it
        takes connections, while the active listened at another address."""
        self.addresses.append(self.addresses.pop(0))

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """host:port (the group's configured one) is ignored for the instances'."""
        for attempt in range(len(self.addresses)):
            try:
                return await self.network.connect(*self.addresses[0])
            except OSError:
                self.addresses.append(self.addresses.pop(0))
                if attempt == len(self.addresses) - 1:
                    raise
        raise AssertionError("unreachable: the last attempt raises")
