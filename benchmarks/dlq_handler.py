"""Dead letters handled per second by `mrs dlq-handler` with a 50-rule table.

    python benchmarks/dlq_handler.py                      # 5000 dead letters per run
    python benchmarks/dlq_handler.py --letters 20000 --window 64

Starts one group (a real `mrs serve`), puts N messages on its DLQ with dead-letter
headers, then runs `mrs dlq-handler --once --json` as a subprocess over a 50-rule
table in which 49 rules with several patterns each (wildcards included) miss and
the last rule, a catch-all FWD, takes every message: the worst case for matching.
Two runs: nonrecoverable dead letters (forwarded WF_MEM) and recoverable ones
(forwarded WF_DQF: each forward is fsynced before its DLQ lease is confirmed).
The figure is messages removed from the DLQ divided by the handler's wall clock
(Python start-up and connect included). Each run uses a fresh directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio

from clients import DeliveryMode, Uma, connect
from mrs.tools.cli_support import OneLineParser, positive_int
from sim.processes import GroupProcess

PUT_WINDOW = 64


def write_config(directory: Path, letters: int) -> Path:
    path = directory / "bus.toml"
    path.write_text(
        textwrap.dedent(f"""\
            [[group]]
            id = 1
            name = "BENCH"
            listen = "127.0.0.1:0"
            data_dir = "g1"
            [group.limits]
            dqf_messages_max = {letters * 2}
            [[group.queue]]
            id = 10
            name = "SENDER"
            [[group.queue]]
            id = 20
            name = "ARCHIVE"
            messages_max = {letters * 2}
            unconfirmed_max = {letters * 2}
        """)
    )
    return path


def rules_table(rules: int = 50) -> str:
    """49 rules that miss (each with several patterns) and a catch-all FWD last."""
    lines = ["* benchmark: 49 rules that never match, then a catch-all", "RETRYINT(1) WAIT(NO)"]
    for index in range(rules - 1):
        lines.append(
            f"DESTQ(Q{index:02d}*) REASON(MQRC_Q_FULL) APPLNAME(app-{index}?) +\n"
            f"   FORMAT(MRS) ACTION(FWD) FWDQ(ARCHIVE) HEADER(NO)"
        )
    lines.append("ACTION(FWD) FWDQ(ARCHIVE) HEADER(YES)")
    return "\n".join(lines) + "\n"


async def put_letters(address: str, letters: int, recoverable: bool) -> None:
    header = {
        "reason": 2085,
        "dest_q_name": "77",
        "dest_q_mgr_name": "1",
        "format": "MRS",
        "put_appl_name": "BENCH",
        "put_appl_type": "MRS",
    }
    body = b"x" * 256
    async with connect(address, queue="SENDER") as sender:

        async def put_some(first: int) -> None:
            for _ in range(first, letters, PUT_WINDOW):
                if recoverable:  # a recoverable original, moved by the DLQ UMA (no queue 50)
                    await sender.put(body, "1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLQ)
                else:
                    await sender.put(
                        body,
                        "DLQ",
                        delivery=DeliveryMode.WF_MEM,
                        headers={"dead_letter_header": header},
                    )

        async with trio.open_nursery() as nursery:
            for first in range(PUT_WINDOW):
                nursery.start_soon(put_some, first)


def run_once(letters: int, recoverable: bool, window: int, scratch: Path | None) -> dict:
    directory = Path(tempfile.mkdtemp(prefix="dlq-bench-", dir=scratch))
    try:
        config = write_config(directory, letters)
        server = GroupProcess(config, 1)
        address = server.start()
        try:
            trio.run(put_letters, address, letters, recoverable)
            rules = directory / "rules.txt"
            rules.write_text(rules_table())
            started = time.perf_counter()
            result = subprocess.run(
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
                    "--once",
                    "--json",
                    "--window",
                    str(window),
                    str(rules),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            elapsed_s = time.perf_counter() - started
        finally:
            server.terminate()
        if result.returncode != 0:
            raise SystemExit(f"handler failed ({result.returncode}): {result.stderr}")
        summary = json.loads(result.stdout.splitlines()[-1])["summary"]
        return {
            "letters": letters,
            "recoverable": recoverable,
            "forwarded": summary["forwarded"],
            "seconds": round(elapsed_s, 3),
            "per_second": round(summary["forwarded"] / elapsed_s),
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = OneLineParser(prog="dlq_handler.py", description=__doc__.splitlines()[0])
    parser.add_argument("--letters", type=positive_int, default=5000)
    parser.add_argument("--window", type=positive_int, default=32, help="handler actions in flight")
    parser.add_argument("--scratch", type=Path, default=None)
    args = parser.parse_args()
    for recoverable in (False, True):
        figures = run_once(args.letters, recoverable, args.window, args.scratch)
        kind = "recoverable (WF_DQF)" if recoverable else "nonrecoverable (WF_MEM)"
        print(
            f"{kind:>24}: {figures['forwarded']} of {figures['letters']} dead letters "
            f"through a 50-rule table in {figures['seconds']} s = {figures['per_second']}/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
