"""The records' checksum: CRC-32 (zlib's polynomial and values), by ISA-L where it is
installed.

Why: every journaled message is checksummed when it is written and again when it is
read back (a cold backlog, replay, dump, the audit). Debian's zlib computes CRC-32
bytewise, ISA-L with carry-less multiplication: 387 against 89 ns for a 1.1 KiB record
on this machine (benchmarks/README.md, "CRC-32 by ISA-L"), 2.7% of the server's
samples in peerbench's end-to-end shape before. The values are the same bit for bit
(tests/unit/test_checksum.py), so a journal written with either is read by the other, and
no record format changes. `isal` is a dependency; the zlib fallback keeps a machine
without its wheel working, only slower.
"""

from __future__ import annotations

from collections.abc import Callable

try:
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel
    from zlib import crc32 as _crc32

crc32: Callable[[bytes | memoryview], int] = _crc32
"""CRC-32 of a buffer, as `zlib.crc32(data)` computes it."""

ISAL = _crc32.__module__ != "zlib"
"""Whether ISA-L computes it (`mrs serve` logs which)."""
