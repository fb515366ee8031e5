"""CPU a running process has used, read from Linux /proc: the load-robust figure the
benchmarks compare between builds (rates are noise on a busy 2-core machine)."""

from __future__ import annotations

import os
from pathlib import Path


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a running process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_written_bytes(pid: int) -> int:
    """Bytes a running process has caused to be sent to the storage layer
    (`write_bytes` of /proc/PID/io: its writes as the page cache hands them to the
    disk, so a page written twice before it went counts once)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "write_bytes":
            return int(value)
    raise ValueError(f"no write_bytes in /proc/{pid}/io")
