"""A read of LMDB's free-page list straight from the file, to find it damaged before a
write transaction does: sound, and naming only pages no database uses.

Why: every write transaction reads the free-page list to reuse pages, but no read
does, so walking every database (mrs.storage.journal_check) never touches it. Damaged, it
lets a group start and then fails every commit (each get commits its delivery mark
first: every get answers JOURNAL_FAIL), or hands out as free a page a database
still uses, which the next commits overwrite. LMDB has no call to read it; its
layout is fixed by the file format (lmdb.h, mdb.c): a meta page names the roots of
the free database and the main one (which holds each named database's root); the
free database's leaves map a transaction id to the list of pages it freed. Read
with `os.pread`: a damaged page number reads as a problem here, never as a fault.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

META_PAGES = 2
"""Pages 0 and 1 are the meta pages; no tree or free page number is below them."""
P_INVALID = 2**64 - 1
"""The root of an empty tree."""
P_BRANCH, P_LEAF, P_OVERFLOW = 0x01, 0x02, 0x04
F_BIGDATA, F_SUBDATA = 0x01, 0x02
"""Leaf node flags: its data sits on overflow pages (the data is their first page
number); its data is a named database's MDB_db (in the main database)."""
_PAGE_HEADER = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper
_NODE = struct.Struct("<HHHH")  # lo, hi, flags, key size
_DB = struct.Struct("<IHHQQQQQ")  # MDB_db: pad, flags, depth, 3 page counts, entries, root
_U64 = struct.Struct("<Q")
_META_DBS_AT = 16 + 24  # header; magic, version, address, mapsize
_META_LAST_PG_AT = _META_DBS_AT + 2 * _DB.size
_META_TXNID_AT = _META_LAST_PG_AT + 8
META_READ_BYTES = 4096
"""A meta page's fields all lie in its first bytes, whatever the page size."""
P_META = 0x08
_META_MAGIC = struct.Struct("<II")  # magic, data version: the meta page's first fields
MDB_MAGIC, MDB_DATA_VERSION = 0xBEEFC0DE, 1


def meta_page_whole(page: bytes) -> bool:
    """Whether a meta page passes the check LMDB makes of both at open (flags, magic,
    version): one that fails makes it refuse the whole file, the other one whole."""
    if len(page) < _PAGE_HEADER.size + _META_MAGIC.size:
        return False
    flags = _PAGE_HEADER.unpack_from(page)[2]
    found = _META_MAGIC.unpack_from(page, _PAGE_HEADER.size)
    return bool(flags & P_META) and found == (MDB_MAGIC, MDB_DATA_VERSION)


DEPTH_MAX = 32
"""Deeper than any B-tree of a file that fits in memory: a damaged depth."""


def problems(data_file: Path, txn_id: int) -> list[str]:
    """What is wrong with the free-page list as of the commit `txn_id`: an empty list
    when it reads whole, every page number in it is one of the file's pages, and no
    database uses a page it lists as free."""
    with open(data_file, "rb") as file:
        fd = file.fileno()
        first = os.pread(fd, META_READ_BYTES, 0)
        page_size = struct.unpack_from("<I", first, _META_DBS_AT)[0] if len(first) > 64 else 0
        metas = [first, os.pread(fd, META_READ_BYTES, page_size or META_READ_BYTES)]
        meta = next((m for m in metas if len(m) > 160 and _u64(m, _META_TXNID_AT) == txn_id), None)
        if meta is None:  # both written since: a server is committing (verify runs
            return []  # beside one); a damaged meta page LMDB itself refuses to open
        free_db = _DB.unpack_from(meta, _META_DBS_AT)
        main_db = _DB.unpack_from(meta, _META_DBS_AT + _DB.size)
        page_size, last_page = free_db[0], _u64(meta, _META_LAST_PG_AT)
        if page_size < 512 or last_page >= os.fstat(fd).st_size // page_size:
            return [f"the file is shorter than its meta page says ({last_page + 1} pages)"]
        walk = _Walk(fd, page_size, last_page)
        walk.tree(main_db, "main")
        walk.tree(free_db, "free")
        if not walk.found and free_db[6] != walk.free_entries:
            walk.found.append(
                f"{walk.free_entries} entries where its meta page counts {free_db[6]}"
            )
        if not walk.found:
            walk.check_freed()
        return walk.found


def _u64(data: bytes, at: int) -> int:
    return _U64.unpack_from(data, at)[0]


class _Walk:
    """One walk down the file's B-trees: which pages they use, which are listed free,
    and what is wrong (the walk stops at the first problem)."""

    def __init__(self, fd: int, page_size: int, last_page: int) -> None:
        self.fd, self.page_size, self.last_page = fd, page_size, last_page
        self.used = bytearray(last_page + 1)  # within the file's size (`problems`)
        self.freed: list[int] = []
        self.free_entries = 0
        self.found: list[str] = []

    def use(self, number: int, count: int = 1) -> bool:
        """Mark pages used; False (and a problem) if one is not the file's or used twice."""
        if number < META_PAGES or number + count - 1 > self.last_page:
            self.found.append(f"page {number} is not one of the file's pages")
            return False
        if any(self.used[number : number + count]):
            self.found.append(f"page {number} is used twice (a damaged page)")
            return False
        self.used[number : number + count] = b"\x01" * count
        return True

    def read(self, number: int, flags_wanted: int) -> bytes | None:
        if not self.use(number):
            return None
        data = os.pread(self.fd, self.page_size, number * self.page_size)
        if len(data) < self.page_size:
            self.found.append(f"page {number} is past the end of the file")
            return None
        stored, _pad, flags, _lower, _upper = _PAGE_HEADER.unpack_from(data)
        if stored != number or not flags & flags_wanted:
            self.found.append(f"page {number} is not the page it should be (a damaged page)")
            return None
        return data

    def tree(self, db: tuple, kind: str) -> None:
        """Walk one database given as its MDB_db: `kind` "main" (its leaves name the
        named databases), "named" (overflow pages) or "free" (lists of freed pages)."""
        depth, overflow_pages, root = db[2], db[5], db[7]
        if root == P_INVALID:
            return
        if not 1 <= depth <= DEPTH_MAX:
            self.found.append(f"a database's depth {depth} is damaged")
            return
        if depth > 1 and kind == "named" and not overflow_pages:
            kind = "leaves unread"  # they name no pages: reading them is the walk's cost
        self.page(root, depth, kind)

    def page(self, number: int, depth: int, kind: str) -> None:
        """Walk the subtree at `number`, `depth` levels high (1: a leaf); the leaves
        of a "leaves unread" tree are only counted as used (LMDB's own walk of every
        database reads them)."""
        if depth == 1 and kind == "leaves unread":
            self.use(number)
            return
        data = self.read(number, P_LEAF if depth <= 1 else P_BRANCH)
        if data is None:
            return
        _stored, _pad, _flags, lower, upper = _PAGE_HEADER.unpack_from(data)
        if not _PAGE_HEADER.size <= lower <= upper <= self.page_size:
            self.found.append(f"page {number} has a damaged header")
            return
        nodes = struct.unpack_from(f"<{(lower - _PAGE_HEADER.size) // 2}H", data, 16)
        if nodes and (min(nodes) < upper or max(nodes) > self.page_size - _NODE.size):
            self.found.append(f"page {number} has a node outside the page")
            return
        if depth <= 1 and kind == "named":  # most pages: only overflow nodes name pages
            nodes = tuple(at for at in nodes if data[at + 4] & F_BIGDATA)
        if depth == 2 and kind == "leaves unread":
            self.use_leaves(data, nodes)
            return
        for at in nodes:
            lo, hi, node_flags, key_size = _NODE.unpack_from(data, at)
            if depth > 1:  # a branch node: the child's page number in lo, hi, flags
                self.page(lo | hi << 16 | node_flags << 32, depth - 1, kind)
            elif kind == "free" or node_flags & (F_BIGDATA | F_SUBDATA):
                self.leaf_node(data, at + _NODE.size + key_size, lo | hi << 16, node_flags, kind)
            if self.found:
                return

    def use_leaves(self, data: bytes, nodes: tuple[int, ...]) -> None:
        """Mark the leaves a branch page names as used without reading them: the
        walk's hot loop, once per leaf page of every large database."""
        used, last_page, unpack = self.used, self.last_page, _NODE.unpack_from
        for at in nodes:
            lo, hi, node_flags, _key_size = unpack(data, at)
            number = lo | hi << 16 | node_flags << 32
            if number < META_PAGES or number > last_page or used[number]:
                self.use(number)  # says which problem it is
                return
            used[number] = 1

    def leaf_node(self, page: bytes, at: int, size: int, node_flags: int, kind: str) -> None:
        """A leaf node whose data names pages: overflow pages, a named database, or
        (in the free database) the pages one transaction freed."""
        if node_flags & F_BIGDATA:
            first = _u64(page, at)
            header = os.pread(self.fd, _PAGE_HEADER.size, first * self.page_size)
            pages = struct.unpack_from("<I", header, 12)[0] if len(header) == 16 else 0
            if not self.use(first, max(pages, 1)):
                return
            page, at = os.pread(self.fd, size, first * self.page_size + _PAGE_HEADER.size), 0
        if kind == "main" and node_flags & F_SUBDATA:
            self.tree(_DB.unpack_from(page, at), "named")
        elif kind == "free":
            self.free_list(page, at, size)

    def free_list(self, page: bytes, at: int, size: int) -> None:
        """One leaf's list of freed pages: a count, then that many page numbers."""
        self.free_entries += 1
        count = _u64(page, at) if size >= 8 and at + size <= len(page) else -1
        if not 0 <= count * 8 + 8 <= size:
            self.found.append(f"a list of freed pages ({size} bytes) is damaged")
            return
        self.freed.extend(struct.unpack_from(f"<{count}Q", page, at + 8))

    def check_freed(self) -> None:
        bad = next((n for n in self.freed if not META_PAGES <= n <= self.last_page), None)
        if bad is not None:
            self.found.append(f"freed page number {bad} is not one of the file's pages")
            return
        used = next((n for n in self.freed if self.used[n]), None)
        if used is not None:
            self.found.append(f"page {used} is listed as free, but a database uses it")
