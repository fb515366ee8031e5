"""Field types of events: annotated ints, bytes and literals that msgspec enforces."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from mrs.limits import CORRELATION_ID_BYTES_MAX, PRIORITY_MAX
from mrs.protocol.checks import INT32, INT64

RequestId = Annotated[int, Meta(ge=1, le=INT64[1])]
"""A request's id: chosen by the requester, unique among its unanswered requests."""
Seq = Annotated[int, Meta(ge=0)]
"""A message's sequence number in its group: 0..2**64-1 (msgpack's uint64 is the top)."""
I64 = Annotated[int, Meta(ge=INT64[0], le=INT64[1])]
I32 = Annotated[int, Meta(ge=INT32[0], le=INT32[1])]
Priority = Annotated[int, Meta(ge=0, le=PRIORITY_MAX)]
NonNegativeMs = Annotated[int, Meta(ge=0, le=INT64[1])]
"""A put's timeout: 0 means the default."""
GetTimeoutMs = Annotated[int, Meta(ge=-1, le=INT64[1])]
"""A get's timeout: -1 waits forever, 0 polls."""
CorrelationId = Annotated[bytes, Meta(max_length=CORRELATION_ID_BYTES_MAX)]
Role = Literal["app", "link"]
GroupId = Annotated[int, Meta(ge=0, le=32_000)]
"""A group's id, 1..32000 as in the config (mrs.config.bus.GROUP_ID_MAX); 0: no group."""
Incarnation = Annotated[bytes, Meta(max_length=64)]
"""A group's journals' incarnation on a link (mrs.group.incarnation); empty: not said."""
