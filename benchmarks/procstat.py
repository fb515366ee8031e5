"""CPU a running process has used, read from Linux /proc: the load-robust figure the
benchmarks compare between builds (rates are noise on a busy 2-core machine)."""

from __future__ import annotations

import os
from pathlib import Path


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a running process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
