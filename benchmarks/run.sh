#!/usr/bin/env bash
# Run the durable-throughput bench on the disk holding the current directory.
# Extra arguments go to `mrs bench` (e.g. --seconds 10 --clients 1 8 32).
set -euo pipefail
exec mrs bench "$@"
