"""Damage trials on a client SAF journal: what an application gets when it attaches
with a journal file damaged at random, by outcome.

    python benchmarks/client_saf_damage.py              # 60 trials, seed 1
    python benchmarks/client_saf_damage.py --trials 200 --seed 7

Each trial copies a journal of 20 acknowledged records, damages the copy (a byte
flipped anywhere, a byte of a record flipped, a page zeroed, the meta pages zeroed,
the file cut short, emptied or deleted) and opens it in a child process as `connect`
does. Outcomes: `refused` (JournalFailed, one line), `intact` (opened, all 20
records as written: the damage hit unused space), and the ones that must stay 0:
`silent loss` (opened, a record missing or changed), `crash` (a signal or a
traceback). The scratch directory (default ./.bench-client-saf-damage) is removed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients import DeliveryMode, connect  # noqa: E402

RECORDS = 20
PAGE_BYTES = 4096
CHILD = """
import sys
from clients import JournalFailed
from clients.saf_journal import ClientJournal
try:
    journal = ClientJournal(sys.argv[1])
except JournalFailed as refused:
    print("refused", refused)
    sys.exit(0)
print("opened", *[record.body.hex() for _key, record in journal.read_after(None, 1000)])
"""


async def make_journal(path: Path) -> list[str]:
    bodies = [(b"order %02d " % index) * 20 for index in range(RECORDS)]
    async with connect("127.0.0.1:1", "1.10", saf_journal=path, reconnect=None) as client:
        for body in bodies:
            await client.put(body, target="1.11", delivery=DeliveryMode.WF_DQF)
    return [body.hex() for body in bodies]


def damage(data: Path, rng: random.Random) -> str:
    size = data.stat().st_size
    kind = rng.choice(["byte", "record byte", "page", "meta", "cut", "empty", "delete"])
    with open(data, "r+b") as file:
        if kind == "byte":
            at = rng.randrange(size)
            file.seek(at)
            old = file.read(1)[0]
            file.seek(at)
            file.write(bytes([old ^ (1 << rng.randrange(8))]))
        elif kind == "record byte":
            content = data.read_bytes()
            at = content.find(b"order %02d " % rng.randrange(RECORDS)) + rng.randrange(200)
            file.seek(at)
            file.write(bytes([content[at] ^ 0xFF]))
        elif kind == "page":
            file.seek(rng.randrange(2, size // PAGE_BYTES) * PAGE_BYTES)
            file.write(bytes(PAGE_BYTES))
        elif kind == "meta":
            file.write(bytes(2 * PAGE_BYTES))
        elif kind == "cut":
            file.truncate(rng.randrange(1, size))
        elif kind == "empty":
            file.truncate(0)
    if kind == "delete":
        data.unlink()
    return kind


def trial(template: Path, scratch: Path, bodies: list[str], rng: random.Random) -> tuple[str, str]:
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(template, scratch)
    kind = damage(scratch / "data.mdb", rng)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(scratch)], capture_output=True, text=True, timeout=120
    )
    words = done.stdout.split()
    if done.returncode != 0 or "Traceback" in done.stderr or not words:
        return kind, "crash"
    if words[0] == "refused":
        return kind, "refused"
    return kind, "intact" if words[1:] == bodies else "silent loss"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scratch", type=Path, default=Path(".bench-client-saf-damage"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.scratch, ignore_errors=True)
    try:
        template = args.scratch / "template"
        bodies = trio.run(make_journal, template)
        outcomes: Counter[tuple[str, str]] = Counter()
        for _ in range(args.trials):
            outcomes[trial(template, args.scratch / "trial", bodies, rng)] += 1
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)
    totals = Counter(outcome for (_kind, outcome), count in outcomes.items() for _ in range(count))
    print(
        f"{args.trials} trials (seed {args.seed}): "
        + ", ".join(
            f"{outcome} {totals[outcome]}"
            for outcome in ("refused", "intact", "silent loss", "crash")
        )
    )
    for (kind, outcome), count in sorted(outcomes.items()):
        print(f"  {kind:12} {outcome:12} {count}")
    sys.exit(1 if totals["silent loss"] or totals["crash"] else 0)


if __name__ == "__main__":
    main()
