"""The link sub-protocol by hand: typed transfers, results and notices on the wire.

Run: python docs/examples/link_frames.py  (no server needed: mrs.protocol is sans-I/O)
"""

import msgpack

from mrs import protocol as wire
from mrs.model import DeliveryMode, Status, Uma

dialer, listener = wire.Connection("client"), wire.Connection("server")

# A link starts with a Hello naming the dialing group (here group 1).
hello = dialer.send(wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1))

# One message for the peer's queue 10, as group 1's SAF drain sends it.
message = wire.TransferredMessage(
    seq=7, target_queue=10, source_group=1, source_queue=11, body=b"order 42",
    msg_class=0, msg_type=0, priority=0, delivery=int(DeliveryMode.WF_SAF), uma=int(Uma.DISC),
    correlation_id=b"", put_time_ns=0, headers=None, ordered=True,
)  # fmt: skip
listener.receive_data(hello + dialer.send(wire.LinkTransfer(1, [message])))
print("the peer reads:", listener.events())

# Its answer: one typed result per message; then a typed confirm notice travels back.
listener.send(wire.Welcome(wire.PROTOCOL_VERSION, 2, "LDN"))
ack = listener.send(wire.LinkAck(1, [wire.LinkResult(seq=7, status=Status.STORED, stored_seq=7)]))
notice = listener.send(wire.LinkNotice(2, [wire.ConfNotice(seq=7, status=Status.SUCCESS)]))
print("a notice on the wire:", msgpack.unpackb(notice[4:]))  # [42, 2, [['conf', 7, 1]]]

# A malformed item breaks the link with a one-line reason naming the field.
bad = msgpack.packb([42, 3, [["conf", -1, 0]]])
listener.receive_data(len(bad).to_bytes(4, "big") + bad)
try:
    listener.next_event()
except wire.RemoteProtocolError as error:
    print("peer refused:", error, f"(status {error.status.name})")
