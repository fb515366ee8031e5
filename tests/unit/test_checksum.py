"""The records' checksum: ISA-L's CRC-32 must equal zlib's for any bytes, or a journal
written before (or by a machine without isal) would read back as corrupt."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from journals import checksum
from journals.record import Record, decode_record, encode_record


@given(st.binary(max_size=4096), st.integers(min_value=0, max_value=64))
def test_crc32_equals_zlibs_for_any_bytes_and_offset(data: bytes, offset: int) -> None:
    view = memoryview(data)[min(offset, len(data)) :]  # records checksum a payload view
    assert checksum.crc32(view) == zlib.crc32(view)


def test_the_fast_crc32_is_the_one_installed() -> None:
    """isal is a dependency: without it every record costs ~0.3 µs more per KiB."""
    assert checksum.ISAL


@given(st.binary(max_size=2048))
def test_a_record_checksummed_by_zlib_reads_back(body: bytes) -> None:
    encoded = encode_record(Record(7, 1, 10, 1, 100, body))
    header, payload = encoded[:6], encoded[6:]
    assert int.from_bytes(header[2:6], "big") == zlib.crc32(payload)
    assert decode_record(encoded).body == body
