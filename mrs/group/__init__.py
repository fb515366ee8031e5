"""One group's message recovery service, as rooms with one job each (docs/architecture.md).

The public names: `Group` (the switchboard the server talks to), the link session
and its trio driver, and `Guarantees`/`KEPT`, the rules a group keeps at the points
where a broken build (mrs.testing.broken_builds) departs from them. Each room is a
module of this package: context, sequence, dqf, umas, outbound, drain, inbound,
notices, intake, handover, recovery; links in link_session (sans-I/O) and
link_driver (trio).

Layer: socket-free except the link dialer; may import `protection`, `transport`,
`config`, `storage`, `protocol`, `core` and the root vocabulary, never `security`,
`ops` or `server`.
"""

from mrs.group.context import BODIES_IN_MEMORY_PER_QUEUE_MAX, GroupContext, Session, Timers
from mrs.group.guarantees import KEPT, Guarantees
from mrs.group.reply import PutReply
from mrs.group.shapes import delivery_event
from mrs.group.wiring import Group, LinkRooms

__all__ = [
    "BODIES_IN_MEMORY_PER_QUEUE_MAX",
    "KEPT",
    "Group",
    "GroupContext",
    "Guarantees",
    "LinkRooms",
    "PutReply",
    "Session",
    "Timers",
    "delivery_event",
]
