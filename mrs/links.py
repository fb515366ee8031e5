"""Old import path of the link session and its driver (now mrs.group.link_session and
mrs.group.link_driver); kept so code written before the move still imports."""

from mrs.group.link_driver import (
    BACKOFF_S_MAX,
    BACKOFF_S_MIN,
    HANDSHAKE_TIMEOUT_S,
    LINK_PROGRAM_DIGITS_MAX,
    LINK_PROGRAM_PREFIX,
    DialedChannel,
    LinkRefused,
    dial_forever,
    new_link,
    parse_link_program,
    pump,
)
from mrs.group.link_session import (
    FRAME_OVERHEAD_BYTES,
    NOTICES_PER_FRAME_MAX,
    RETRY_S_MAX,
    RETRY_S_MIN,
    TRANSFER_BYTES_MAX,
    TRANSFER_MESSAGES_MAX,
    WINDOW_MESSAGES_MAX,
    Channel,
    PeerLink,
)
from mrs.limits import RECEIVE_BYTES_MAX

__all__ = [
    "BACKOFF_S_MAX",
    "BACKOFF_S_MIN",
    "FRAME_OVERHEAD_BYTES",
    "HANDSHAKE_TIMEOUT_S",
    "LINK_PROGRAM_DIGITS_MAX",
    "LINK_PROGRAM_PREFIX",
    "NOTICES_PER_FRAME_MAX",
    "RECEIVE_BYTES_MAX",
    "RETRY_S_MAX",
    "RETRY_S_MIN",
    "TRANSFER_BYTES_MAX",
    "TRANSFER_MESSAGES_MAX",
    "WINDOW_MESSAGES_MAX",
    "Channel",
    "DialedChannel",
    "LinkRefused",
    "PeerLink",
    "dial_forever",
    "new_link",
    "parse_link_program",
    "pump",
]
