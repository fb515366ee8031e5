"""Join the stamps `sitecustomize.py` wrote (server and client) and print each leg of
a put's answer time: median, mean, p90, p99 in milliseconds.

    python benchmarks/latency_trace/report.py /tmp/trace
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

LEGS = [
    "called -> client wrote",
    "client wrote -> server read",
    "server read -> dispatched",
    "dispatched -> commit began",
    "commit began -> PutDone queued",
    "PutDone queued -> server wrote",
    "server wrote -> client read",
    "client read -> caller resumed",
    "total",
]


def _load(path: str) -> dict[str, list[int]]:
    with open(path) as stamps:
        return json.load(stamps)


def main(directory: str) -> None:
    (server_file,) = glob.glob(os.path.join(directory, "srv-*.json"))
    client_files = glob.glob(os.path.join(directory, "cli-*.json"))
    server = _load(server_file)
    legs: dict[str, list[float]] = {leg: [] for leg in LEGS}
    for client_file in client_files:
        for request_id, client in _load(client_file).items():
            stamps = server.get(request_id)
            if len(client) != 4 or stamps is None or len(stamps) != 5:
                continue
            called, written, read, resumed = client
            got, dispatched, commit, queued, sent = stamps
            points = [called, written, got, dispatched, commit, queued, sent, read, resumed]
            spans = [later - earlier for earlier, later in zip(points, points[1:], strict=False)]
            for leg, span_ns in zip(LEGS, [*spans, resumed - called], strict=True):
                legs[leg].append(span_ns / 1e6)
    for leg, values in legs.items():
        values.sort()
        count = len(values)
        p90, p99 = values[int(0.9 * count)], values[int(0.99 * count)]
        print(
            f"{leg:32} p50 {statistics.median(values):6.3f}  mean {statistics.mean(values):6.3f}"
            f"  p90 {p90:6.3f}  p99 {p99:6.3f}  (n={count})"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/trace")
