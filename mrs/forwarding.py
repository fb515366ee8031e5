"""Old import path of the forwarding rules (now the rooms mrs.group.outbound, .drain,
.inbound, .notices and the wire shape mrs.group.transfer); kept so code written
before the move still imports."""

from mrs.group.drain import DrainAnswer
from mrs.group.peers import Inbound, LinkPort, PeerState, Result
from mrs.group.transfer import (
    LINK_LOST,
    PERMANENT_REFUSALS,
    RECEIVER_DEAD_LETTERED,
    TRANSFER_FIELDS,
    TransferError,
    status_name,
    transfer_fields,
)

__all__ = [
    "LINK_LOST",
    "PERMANENT_REFUSALS",
    "RECEIVER_DEAD_LETTERED",
    "TRANSFER_FIELDS",
    "DrainAnswer",
    "Inbound",
    "LinkPort",
    "PeerState",
    "Result",
    "TransferError",
    "status_name",
    "transfer_fields",
]
