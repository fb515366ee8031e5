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

from mrs.config.addresses import host_port
from mrs.config.instance_types import InstanceConfig
from mrs.limits import LINK_HANDSHAKE_TIMEOUT_S as HANDSHAKE_TIMEOUT_S
from mrs.transport.dial_reason import dial_reason
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
        """host:port (the group's configured one) is ignored for the instances'. Each
        instance is given an equal share of the link's handshake time (one share kept
        back, so the last one ends before the driver's own timeout): one that neither
        takes nor refuses the connection (its machine vanished: no RST, the SYN never
        answered) is passed over like one that refuses it. Before, the one that
        answered last was dialled first at every redial for the whole handshake
        timeout, and the link never reached the new active."""
        attempt_s = HANDSHAKE_TIMEOUT_S / (len(self.addresses) + 1)
        failures: list[str] = []
        for _ in range(len(self.addresses)):
            instance_host, instance_port = self.addresses[0]
            why = f"no answer in {attempt_s:.2f} s"
            with trio.move_on_after(attempt_s):
                try:
                    return await self.network.connect(instance_host, instance_port)
                except OSError as error:
                    why = _why(error)
            failures.append(f"{host_port(instance_host, instance_port)} {why}")
            self.addresses.append(self.addresses.pop(0))
        raise OSError(f"no instance took the connection: {'; '.join(failures)}")


def _why(error: OSError) -> str:
    """What one instance said, in a few words (trio wraps each address's error in one
    that repeats the address: "all attempts to connect to ... failed")."""
    cause = error.__cause__
    inner = cause.exceptions[0] if isinstance(cause, BaseExceptionGroup) else cause
    found = inner if isinstance(inner, OSError) else error
    return dial_reason(found) or str(found) or type(found).__name__
