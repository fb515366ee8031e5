"""Bench results: one measured figure (`Result`) and the bench's constants.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

TARGET_QUEUE = 10
SENDER_QUEUE_FIRST = 100
SENDER_QUEUE_LAST = 999
LMDB_VALUE_BYTES = 1024
PIPELINE_CONNECTIONS = 4
PIPELINE_TASKS_PER_CONNECTION = 32
CROSS_GROUP_CONNECTIONS = 32
"""Clients of the cross-group put run (each one put at a time), paired with the
same-group run of as many clients."""
E2E_PRODUCER_CONNECTIONS = 4
E2E_PRODUCER_TASKS_PER_CONNECTION = 32
E2E_CONSUMER_TASKS = 32
"""get+confirm loops sharing the one consumer connection."""
E2E_GET_TIMEOUT_S = 1.0
TARGET_UNCONFIRMED_MAX = 100_000
"""The target queue confirms out of order, so 32 concurrent confirms are fine."""
DQF_MESSAGES_MAX = 10_000_000
JOURNAL_BYTES_MAX = 8 << 30
"""LMDB map size of the bench server; the file is sparse, so this costs no disk."""
SERVER_STOP_TIMEOUT_S = 30.0
STATUS_WAIT_S = 30.0
LINK_UP_WAIT_S = 30.0
LOCAL_GROUP = 1
REMOTE_GROUP = 2
_STAMP = struct.Struct("<d")
"""perf_counter() at the put, at the front of each end-to-end body (for latency)."""


@dataclass
class Result:
    """One measured figure."""

    name: str
    kind: str
    """"fsync", "lmdb" or "server"."""
    count: int
    elapsed_s: float
    latencies_s: list[float] = field(default_factory=list, repr=False)
    connections: int = 0
    in_flight: int = 0
    failures: int = 0
    msgs_per_commit: float | None = None
    writer_delta: dict | None = None
    """The writer of the group whose DQF receives the messages (`dqf_group`)."""
    server_cpu_pct: float | None = None
    """All server processes of the run together."""
    client_cpu_pct: float | None = None
    dqf_messages_after: int | None = None
    workload: str = ""
    """Server rows: "put" (WF_DQF puts only) or "put-get-confirm" (end to end)."""
    route: str = ""
    """Server rows: "same-group" or "cross-group" (over the link 1 -> 2)."""
    dqf_group: int | None = None
    batches_per_commit: float | None = None
    writer_deltas: dict[str, dict] | None = None
    """Every group's writer delta, by group id."""
    server_cpu_pct_by_group: dict[str, float | None] | None = None
    link_after: dict | None = None
    """Cross-group rows: group 1's view of the link to group 2 after the run."""
    consumer_in_flight: int = 0
    puts_stored: int | None = None
    """End-to-end rows: puts answered STORED within the window."""
    first_failure: str = ""
    """Server rows: what the first failed request or refused put was answered (for the
    one line a run that stored nothing stops with; not in the JSON)."""

    @property
    def rate(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def latency_ms(self, quantile: float) -> float | None:
        if not self.latencies_s:
            return None
        ordered = sorted(self.latencies_s)
        index = min(len(ordered) - 1, max(0, round(quantile * (len(ordered) - 1))))
        return 1000 * ordered[index]

    @property
    def mean_latency_ms(self) -> float | None:
        if not self.latencies_s:
            return None
        return 1000 * sum(self.latencies_s) / len(self.latencies_s)
