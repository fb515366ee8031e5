"""Move "queue full" dead letters back once the queue drains (docs/dlq-handler.md).

Run against a server on docs/examples/bus.toml:  python docs/examples/dlq_queue_full.py HOST:PORT
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clients import DeliveryMode, NoMoreMessages, Uma, connect_sync

RULES = """\
* Control data: re-scan every second; stop after 5 idle seconds.
RETRYINT(1) WAIT(5)
* Queue full: put it back to where it was going, once there is room.
REASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(60)
* Catch-all: anything else goes where an operator will look at it.
ACTION(FWD) FWDQ(REALLY_DEAD) HEADER(YES)
"""

address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001"
config = Path(__file__).with_name("bus.toml")

with connect_sync(address, "SENDER") as sender:
    for number in range(5):  # SMALLQ holds 2: three of these become dead letters
        psb = sender.put(b"order %d" % number, "SMALLQ", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
        print(f"put order {number}: {psb.delivery_status.name}, {psb.uma_status.name}")

with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as rules:
    rules.write(RULES)
handler = subprocess.Popen(
    [
        sys.executable,
        "-m",
        "mrs",
        "dlq-handler",
        "--config",
        str(config),
        "--group",
        "1",
        "--address",
        address,
        rules.name,
    ],
    stdout=subprocess.PIPE,
    text=True,
)

# SMALLQ is still full: the handler's first attempt fails, and it waits RETRYINT.
# Start the consumer only once that attempt reached the server (a slow start of the
# handler's process would otherwise let the consumer make room first).
deadline = time.monotonic() + 30
with connect_sync(address, None) as watcher:
    while time.monotonic() < deadline:
        readers = watcher.status()["dlq_readers"]
        if readers and readers[0]["put"] >= 1:
            break
        time.sleep(0.05)
received = []
with connect_sync(address, "SMALLQ") as small:  # the consumer drains SMALLQ slowly
    while len(received) < 5:
        try:
            received.append(small.get(timeout=10).body.decode())
        except NoMoreMessages:
            break
print("SMALLQ received:", ", ".join(sorted(received)))

report, _ = handler.communicate(timeout=60)
for line in report.splitlines():
    print("handler:", line.split(" ", 1)[1] if line[:4].isdigit() else line)
print(f"handler exit code {handler.returncode}")
Path(rules.name).unlink()
