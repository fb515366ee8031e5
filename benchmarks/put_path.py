"""The server's put path in process: CPU per WF_DQF put, with no socket and no client.

Why: on a loaded machine a bench's rates are noise, and even the server's CPU per put
carries the event loop and socket costs. This drives `Group.put` directly (the
rooms, real LMDB journals with fsync, the production InlineWriter committing every
`--batch` puts, as the server's commit loop does under load) and prints the
process CPU time per put, so two versions of the put path can be set side by side.
`--profile` prints the top functions by own time (cProfile) instead.

    .venv/bin/python benchmarks/put_path.py
    .venv/bin/python benchmarks/put_path.py --puts 50000 --batch 400 --key   # idempotency keys
    .venv/bin/python benchmarks/put_path.py --profile
"""

from __future__ import annotations

import cProfile
import pstats
import shutil
import tempfile
import time
from pathlib import Path

from in_process import Session, open_group  # the sibling module: imports mrs first

from mrs import protocol as wire
from mrs.model import DeliveryMode, Uma
from mrs.server import gc_tuning
from mrs.tools.cli_support import OneLineParser, positive_int

BUS = """
[[group]]
id = 1
name = "G1"
listen = "127.0.0.1:0"
data_dir = "g1"
[group.limits]
dqf_messages_max = 10000000
[[group.queue]]
id = 10
name = "TARGET"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 100
name = "SENDER"
"""
JOURNAL_BYTES = 4 << 30


def run(
    puts: int, batch: int, with_key: bool, body_bytes: int, mode: DeliveryMode = DeliveryMode.WF_DQF
) -> float:
    """CPU seconds per put over `puts` puts in `mode`, a commit every `batch` (an AK
    mode's MRS_ACKs are queued on the sender's queue, left there)."""
    directory = Path(tempfile.mkdtemp(prefix="mrs-put-path-", dir=Path.cwd()))
    try:
        group, writer, store = open_group(BUS, directory, 1, JOURNAL_BYTES)
        session = Session()
        group.attach(session, wire.Attach(request_id=1, queue="1.100"))
        body = b"x" * body_bytes
        requests = [
            wire.Put(
                request_id=index + 1,
                target="1.10",
                body=body,
                delivery=int(mode),
                uma=int(Uma.DLJ),
                msg_class=0,
                msg_type=0,
                priority=0,
                timeout_ms=0,
                correlation_id=b"",
                resp_q="",
                headers={"idempotency_key": f"k{index}"} if with_key else None,
            )
            for index in range(puts)
        ]
        gc_tuning.tune_gc_for_server()  # as `mrs serve` does once it has started
        started_s = time.process_time()
        for index, request in enumerate(requests, 1):
            group.put(session, request)
            if index % batch == 0:
                writer.commit_pending()
                session.sent.clear()
        writer.commit_pending()
        spent_s = time.process_time() - started_s
        store.close()
        return spent_s / puts
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = OneLineParser(prog="put_path.py", description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=positive_int, default=30_000)
    parser.add_argument("--batch", type=positive_int, default=400, help="puts per commit")
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--key", action="store_true", help="each put has an idempotency key")
    parser.add_argument("--mode", default="WF_DQF", choices=[m.name for m in DeliveryMode])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    mode = DeliveryMode[args.mode]
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, args.puts, args.batch, args.key, args.body_bytes, mode)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
        return
    per_put_s = run(args.puts, args.batch, args.key, args.body_bytes, mode)
    print(
        f"{1e6 * per_put_s:.2f} us CPU per {mode.name} put "
        f"({args.puts} puts, {args.batch} per commit)"
    )


if __name__ == "__main__":
    main()
