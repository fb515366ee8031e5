"""The wire protocol by hand: build events, see their frame bytes, decode them again.

Run: python docs/examples/protocol_frames.py  (no server needed: mrs.protocol is sans-I/O)
"""

from mrs import protocol as wire

client, server = wire.Connection("client"), wire.Connection("server")

# A client's first frame is its Hello; it may pipeline requests right behind it.
stream = client.send(wire.Hello(wire.PROTOCOL_VERSION, "doc"))
get = client.send(wire.Get(7, 0))
print("Get(7, 0) on the wire:", get.hex(" "))
assert get == bytes.fromhex("00000005 94 0e 07 00 c0")  # length 5: [14, 7, 0, nil]
# (nil: no selection; a frame [14, 7, 0] of an older client is read the same)

server.receive_data(stream + get)
print("the server reads:", server.events())

# A field out of range is refused where the event is built, naming the field.
try:
    wire.Put(1, "1.10", b"x", 1, 0, 0, 0, 120, 0, b"", "")
except wire.LocalProtocolError as error:
    print("refused:", error)

# A peer's bad frame breaks the connection with a one-line reason (answer: a Fatal).
server.receive_data(bytes.fromhex("00000004 93 0e 00 00"))  # request_id 0
try:
    server.next_event()
except wire.RemoteProtocolError as error:
    print("peer refused:", error, f"(status {error.status.name})")
