"""A malformed peer: the bytes a broken or hostile program sends to a group's port.

Each variant is what a server meets in the wild: line noise, a frame header
promising more than any frame may hold, msgpack of the wrong shape, events in the
wrong order, a link Hello from a group that has no link (or a digit that is not
ASCII), a Hello that stops half-way. The nemesis sends one, chosen by the seed, and
closes; the server must refuse it and keep serving everyone else.
"""

from __future__ import annotations

import random
import struct

import msgpack

from mrs.protocol import PROTOCOL_VERSION

_HEADER = struct.Struct(">I")


def frame(obj: object) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return _HEADER.pack(len(body)) + body


def _noise(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


def _huge_header(rng: random.Random) -> bytes:
    return _HEADER.pack(rng.choice((0xFFFFFFFF, 1 << 30, 50_000_000))) + b"\x93\x01"


def _wrong_shape(rng: random.Random) -> bytes:
    return frame(rng.choice(({"a": 1}, [], [999, 1, 2], ["1", 2], [1, "x", None], 7)))


def _before_hello(rng: random.Random) -> bytes:
    return frame([12, 1, "1.10", b"x", 26, 4, 0, 0, 0, 0, b"", "", None])


def _stranger_link(rng: random.Random) -> bytes:
    program = rng.choice(("group:99", "group:²", "group:-1", "group:", "group:1x"))
    return frame([1, PROTOCOL_VERSION, program, "link"])


def _bad_version(rng: random.Random) -> bytes:
    return frame([1, rng.choice((0, 2, -1, 2**40)), "evil", "app"])


def _half_hello(rng: random.Random) -> bytes:
    whole = frame([1, PROTOCOL_VERSION, "evil", "app"])
    return whole[: rng.randrange(1, len(whole))]


def _deep_nesting(rng: random.Random) -> bytes:
    depth = rng.randrange(50, 1000)
    return _HEADER.pack(depth + 1) + b"\x91" * depth + b"\x01"


def _hello_then_junk(rng: random.Random) -> bytes:
    return frame([1, PROTOCOL_VERSION, "evil", "app"]) + _wrong_shape(rng) + _noise(rng)


VARIANTS = {
    "noise": _noise,
    "huge-header": _huge_header,
    "wrong-shape": _wrong_shape,
    "before-hello": _before_hello,
    "stranger-link": _stranger_link,
    "bad-version": _bad_version,
    "half-hello": _half_hello,
    "deep-nesting": _deep_nesting,
    "hello-then-junk": _hello_then_junk,
}


def malformed(rng: random.Random) -> tuple[str, bytes]:
    """One variant's name and bytes, chosen by `rng`."""
    name = rng.choice(sorted(VARIANTS))
    return name, VARIANTS[name](rng)
