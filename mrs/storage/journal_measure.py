"""What the journal reserve measures: the journal's pages in use and the free space
on the disk holding it.

Why a module of its own: `mrs.storage.journal_reserve` is compiled (it answers every
recoverable put); these two measures run at most every RESERVE_MEASURE_INTERVAL_S and
stay interpreted, looked up through this module, so the reserve's rule tests can put
a journal and a disk of their choosing in their place.
"""

from __future__ import annotations

import os

from journals import Journal


def pages_in_use_bytes(store) -> int:
    """Bytes of the pages the journals hold now (freed pages, reusable, not counted)."""
    env = store.env
    stat = env.stat()
    pages = 2 + stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
    with env.begin() as txn:
        for journal in Journal:
            db = store.db(journal)
            if db is None:
                continue
            db_stat = txn.stat(db)
            pages += db_stat["branch_pages"] + db_stat["leaf_pages"] + db_stat["overflow_pages"]
    return pages * stat["psize"]


def disk_free_bytes(path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
