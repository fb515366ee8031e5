"""A read of LMDB's free-page list straight from the file, to find it damaged before a
write transaction does.

Why: every write transaction reads the free-page list to reuse pages, but no read
does, so walking every database (mrs.journal_check) never touches it. Damaged, it
lets a group start and then fails every commit (each get commits its delivery mark
first: every get answers JOURNAL_FAIL), or hands out page numbers that are not free.
LMDB has no call to read it; its layout is fixed by the file format (lmdb.h,
mdb.c: a meta page names the free database's root, a B-tree whose leaves map a
transaction id to the list of pages it freed). Read with `os.pread`: a damaged
page number reads as a problem here, never as a fault.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

META_PAGES = 2
"""Pages 0 and 1 are the meta pages; no free page number is below them."""
P_BRANCH, P_LEAF, P_OVERFLOW = 0x01, 0x02, 0x04
F_BIGDATA = 0x01
"""A leaf node whose data sits on overflow pages (its data: their first page number)."""
_PAGE_HEADER = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper
_NODE = struct.Struct("<HHHH")  # lo, hi, flags, key size
_U64 = struct.Struct("<Q")
_META_TXNID_AT = 16 + 128  # header, magic..mapsize (24), two MDB_db (96), last_pg (8)
_META_LAST_PG_AT = 16 + 120
_FREE_DB_AT = 16 + 24
"""The free database's MDB_db in a meta page: md_pad (the page size), md_flags,
md_depth, branch, leaf and overflow page counts, md_entries, md_root."""
PAGES_VISITED_MAX = 1 << 20
"""A bound on the walk: a damaged branch page could point in a circle."""
DEPTH_MAX = 32
META_READ_BYTES = 4096
"""A meta page's fields all lie in its first bytes, whatever the page size."""


def problems(data_file: Path, txn_id: int) -> list[str]:
    """What is wrong with the free-page list as of the commit `txn_id`: an empty list
    when it reads whole and every page number in it is one of the file's pages."""
    with open(data_file, "rb") as file:
        fd = file.fileno()
        first = os.pread(fd, META_READ_BYTES, 0)
        page_size = struct.unpack_from("<I", first, _FREE_DB_AT)[0] if len(first) > 64 else 0
        metas = [first, os.pread(fd, META_READ_BYTES, page_size or META_READ_BYTES)]
        meta = next((m for m in metas if len(m) > 160 and _u64(m, _META_TXNID_AT) == txn_id), None)
        if meta is None:
            return [f"no meta page is of the last commit ({txn_id})"]
        page_size, _flags, depth = struct.unpack_from("<IHH", meta, _FREE_DB_AT)
        if not 1 <= depth <= DEPTH_MAX or page_size < 512:
            return [f"its meta page is damaged (depth {depth}, page size {page_size})"]
        entries, root = struct.unpack_from("<QQ", meta, _FREE_DB_AT + 32)
        last_page = _u64(meta, _META_LAST_PG_AT)
        if root == 2**64 - 1:  # P_INVALID: nothing freed yet
            return [] if entries == 0 else [f"empty, but its meta page counts {entries} entries"]
        walk = _Walk(fd, page_size, last_page)
        walk.page(root, depth)
        if not walk.found and walk.entries != entries:
            walk.found.append(f"{walk.entries} entries where its meta page counts {entries}")
        return walk.found


def _u64(data: bytes, at: int) -> int:
    return _U64.unpack_from(data, at)[0]


class _Walk:
    """One walk down the free database's B-tree, collecting what is wrong."""

    def __init__(self, fd: int, page_size: int, last_page: int) -> None:
        self.fd, self.page_size, self.last_page = fd, page_size, last_page
        self.entries = 0
        self.visited = 0
        self.found: list[str] = []

    def read(self, number: int, flags_wanted: int) -> bytes | None:
        if not META_PAGES <= number <= self.last_page or self.visited >= PAGES_VISITED_MAX:
            self.found.append(f"page {number} is not one of the file's pages")
            return None
        self.visited += 1
        data = os.pread(self.fd, self.page_size, number * self.page_size)
        if len(data) < self.page_size:
            self.found.append(f"page {number} is past the end of the file")
            return None
        stored, _pad, flags, _lower, _upper = _PAGE_HEADER.unpack_from(data)
        if stored != number or not flags & flags_wanted:
            self.found.append(f"page {number} is not the page it should be (a damaged page)")
            return None
        return data

    def page(self, number: int, depth: int) -> None:
        """Walk the subtree at `number`, `depth` levels high (1: a leaf)."""
        data = self.read(number, P_LEAF if depth <= 1 else P_BRANCH)
        if data is None:
            return
        _stored, _pad, _flags, lower, upper = _PAGE_HEADER.unpack_from(data)
        if not _PAGE_HEADER.size <= lower <= upper <= self.page_size:
            self.found.append(f"page {number} has a damaged header")
            return
        for index in range((lower - _PAGE_HEADER.size) // 2):
            at = struct.unpack_from("<H", data, _PAGE_HEADER.size + 2 * index)[0]
            if not upper <= at <= self.page_size - _NODE.size:
                self.found.append(f"page {number} node {index} lies outside its page")
                return
            lo, hi, node_flags, key_size = _NODE.unpack_from(data, at)
            if depth > 1:  # a branch node: the child's page number in lo, hi, flags
                self.page(lo | hi << 16 | node_flags << 32, depth - 1)
            else:
                self.entries += 1
                self.free_list(data, at + _NODE.size + key_size, lo | hi << 16, node_flags)
            if self.found:
                return

    def free_list(self, page: bytes, at: int, size: int, node_flags: int) -> None:
        """Check one leaf's list of freed pages: a count, then that many page numbers."""
        if node_flags & F_BIGDATA:
            overflow = self.read(_u64(page, at), P_OVERFLOW)
            if overflow is None:
                return
            first = _u64(overflow, 0) * self.page_size + _PAGE_HEADER.size
            page, at = os.pread(self.fd, size, first), 0
        if size < 8 or at + size > len(page):
            self.found.append(f"a list of freed pages of {size} bytes is damaged")
            return
        count = _u64(page, at)
        if count * 8 + 8 > size:
            self.found.append(f"a list of freed pages counts {count} in {size} bytes")
            return
        numbers = struct.unpack_from(f"<{count}Q", page, at + 8)
        bad = [number for number in numbers if not META_PAGES <= number <= self.last_page]
        if bad:
            self.found.append(f"freed page number {bad[0]} is not one of the file's pages")
