"""Give the C heap's free pages back to the operating system (glibc `malloc_trim`).

Why: start-up recovery builds each queue's cold backlog (mrs.group.backlog) by growing
arrays of seqs a chunk of keys at a time; glibc keeps the blocks that growth left
behind in the heap, so a server that has read a million keys stayed ~9 MB larger
than its backlog needs. One trim after recovery returns them. Not on the hot path:
on a fragmented heap a trim walks every free chunk (tens of ms), so it runs once,
where the loop is not serving yet. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

_libc = None
if sys.platform == "linux":
    # The process's own symbols, libc's among them; find_library("c") ran ldconfig in a
    # child process (~14 ms) in every `mrs` command.
    _libc = ctypes.CDLL(None)
    if not hasattr(_libc, "malloc_trim"):  # musl
        _libc = None


def trim() -> bool:
    """True if memory was returned to the system."""
    return bool(_libc.malloc_trim(0)) if _libc is not None else False
