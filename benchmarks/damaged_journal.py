"""Damaged-journal trials: what a group does with a journal file damaged on disk.

    python benchmarks/damaged_journal.py                # 40 trials, seed 1
    python benchmarks/damaged_journal.py --trials 8 --seed 7

Fills one group's DQF with 300 acknowledged messages (WF_DQF, after 200 more went
through), kills it, then per
trial damages a copy of its `data.mdb` (a flipped bit in LMDB's free-page list, in a
DQF key, in an index key, anywhere; a page header overwritten, a page zeroed, a
record body altered, the file cut short, a meta page zeroed), runs `mrs journal
verify`, starts the group on it and takes every message it delivers. Each trial ends as one outcome:

- refused: the group would not start, with one line naming `mrs journal verify`,
  and verify finds the damage (else "refused, verify intact");
- intact: all 300 delivered, once each;
- reported loss: fewer delivered, and the loss was reported (verify, server log);
- silent loss: fewer delivered and nothing said;
- stranded: the group started, but records are left in its DQF that it did not
  deliver and did not report;
- failing: the group started and then answered a get with an error.

Silent loss and stranded must stay 0. Works in a fresh temporary directory.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Uma, connect
from journals import Journal, JournalStore
from sim.processes import GroupProcess, ServerStartError, write_single_group_config

MESSAGES = 300
CHURN = 200
PAGE_BYTES = 4096
QUEUE_KEY_PREFIX = b"\x00\x00\x00\x0b"
QUEUES = """
[[group.queue]]
id = 11
name = "ANYORDER"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SENDER"
"""
GOOD_OUTCOMES = ("refused", "intact", "reported loss")
KINDS = (
    "freelist",
    "dqf-key",
    "index-key",
    "bit",
    "page-header",
    "page-zero",
    "body",
    "truncate",
    "meta",
)


async def fill(address: str) -> None:
    """MESSAGES acknowledged messages left in the DQF, after CHURN more went through
    (so the file has free pages, as a used journal has)."""
    async with connect(address, queue="SENDER") as sender:
        for _ in range(CHURN):
            await sender.put(b"churn", target="ANYORDER", delivery=DeliveryMode.WF_DQF)
    async with connect(address, queue="ANYORDER") as receiver:
        for _ in range(CHURN):
            await receiver.confirm((await receiver.get(timeout=5)).seq)
    async with connect(address, queue="SENDER") as sender:
        for index in range(MESSAGES):
            await sender.put(
                b"msg-%04d-" % index + b"x" * 150,
                target="ANYORDER",
                delivery=DeliveryMode.WF_DQF,
                uma=Uma.DISC,
            )


async def drain(address: str) -> tuple[list[bytes], str | None]:
    """Every body the group delivers (confirmed), and the error a get met, if any."""
    bodies: list[bytes] = []
    async with connect(address, queue="ANYORDER") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
                bodies.append(message.body[:8])
                await receiver.confirm(message.seq)
            except NoMoreMessages:
                return bodies, None
            except MrsError as error:
                return bodies, str(error)


def key_offsets(data: bytes, record_follows: bool) -> list[int]:
    """Offsets of queue-11 keys in the file: followed by a record (the DQF's) or not
    (the index's)."""
    found = []
    at = data.find(QUEUE_KEY_PREFIX)
    while at >= 0:
        if data[at - 2 : at] == b"\x0c\x00":  # the node's key size, 12, little-endian
            is_record = data[at + 12 : at + 14] == b"\x4d\x01"
            if is_record == record_follows:
                found.append(at)
        at = data.find(QUEUE_KEY_PREFIX, at + 1)
    return found


def freelist_root(data: bytearray) -> int:
    """The root page of LMDB's free-page database, from the newer meta page (64-bit
    layout: the free DB's md_root at byte 80 of a meta page, the txn id at 144)."""
    metas = [data[page * PAGE_BYTES : (page + 1) * PAGE_BYTES] for page in (0, 1)]
    meta = max(metas, key=lambda page: int.from_bytes(page[144:152], "little"))
    return int.from_bytes(meta[80:88], "little")


def damage(data: bytearray, kind: str, rng: random.Random) -> bytearray:
    """The file's bytes with one damage of `kind` (data pages are from page 2 on)."""
    pages = len(data) // PAGE_BYTES
    if kind in ("dqf-key", "index-key"):
        offsets = key_offsets(bytes(data), record_follows=kind == "dqf-key")
        at = rng.choice(offsets) + rng.randrange(4, 12)
        data[at] ^= 1 << rng.randrange(8)
    elif kind == "bit":
        at = rng.randrange(2 * PAGE_BYTES, len(data))
        data[at] ^= 1 << rng.randrange(8)
    elif kind == "page-header":
        page = rng.randrange(2, pages)
        data[page * PAGE_BYTES : page * PAGE_BYTES + 16] = rng.randbytes(16)
    elif kind == "page-zero":
        page = rng.randrange(2, pages)
        data[page * PAGE_BYTES : (page + 1) * PAGE_BYTES] = bytes(PAGE_BYTES)
    elif kind == "body":
        at = data.find(b"msg-%04d-" % rng.randrange(MESSAGES))
        data[at + rng.randrange(4, 150)] ^= 0xFF
    elif kind == "truncate":
        del data[rng.randrange(PAGE_BYTES, len(data)) :]
    elif kind == "freelist":
        page = freelist_root(data) * PAGE_BYTES  # a bit of its nodes (from `upper` on)
        upper = int.from_bytes(data[page + 14 : page + 16], "little")
        data[page + rng.randrange(upper, PAGE_BYTES)] ^= 1 << rng.randrange(8)
    elif kind == "meta":
        page = rng.randrange(2)
        data[page * PAGE_BYTES : (page + 1) * PAGE_BYTES] = bytes(PAGE_BYTES)
    return data


def verify(config: Path) -> int:
    command = [sys.executable, "-m", "mrs", "journal", "verify", "--config", str(config)]
    result = subprocess.run(
        [*command, "--group", "1"], capture_output=True, text=True, timeout=120, check=False
    )
    return result.returncode


def dqf_left(journals: Path) -> int:
    """Records still in the DQF (read in a child: the file is damaged)."""
    code = (
        "import sys; from journals import JournalStore, Journal; "
        "s = JournalStore(sys.argv[1], readonly=True); print(s.count(Journal.DQF))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(journals)], capture_output=True, text=True, check=False
    )
    return int(result.stdout) if result.returncode == 0 and result.stdout.strip() else -1


def trial(directory: Path, damaged: bytes) -> tuple[str, str]:
    """One damaged copy, verified, started and drained: (outcome, detail)."""
    config = write_single_group_config(directory, queues=QUEUES)
    journals = directory / "g1" / "journals"
    journals.mkdir(parents=True)
    (journals / "data.mdb").write_bytes(damaged)
    verified = verify(config)
    process = GroupProcess(config, 1)
    log = directory / "group1.log"
    try:
        address = process.start()
    except ServerStartError:
        refusal = [line for line in log.read_text().splitlines() if line.startswith("mrs: ")]
        hinted = len(refusal) == 1 and "mrs journal verify" in refusal[0]
        why = refusal[0][:160] if refusal else log.read_text()[-300:]
        if not hinted:
            return "refused-unexplained", f"verify={verified} {why}"
        return ("refused" if verified else "refused, verify intact"), f"verify={verified} {why}"
    try:
        bodies, error = trio.run(drain, address)
    finally:
        process.kill()
    logged = any(" ERROR " in line or " CRITICAL " in line for line in log.read_text().splitlines())
    reported = verified != 0 or logged
    left = dqf_left(journals)
    detail = f"verify={verified} delivered={len(bodies)} left={left} logged={logged}"
    if error is not None:
        return "failing", f"{detail} error={error}"
    if len(bodies) == len(set(bodies)) == MESSAGES:
        return "intact", detail
    if left > 0 and verified == 0:
        return "stranded", detail
    return ("reported loss" if reported else "silent loss"), detail


def pristine_journal(directory: Path) -> bytes:
    config = write_single_group_config(directory, queues=QUEUES)
    process = GroupProcess(config, 1)
    trio.run(fill, process.start())
    process.kill()
    store = JournalStore(directory / "g1" / "journals", readonly=True)
    assert store.count(Journal.DQF) == MESSAGES
    store.close()
    return (directory / "g1" / "journals" / "data.mdb").read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--keep", type=Path, help="save each damaged file whose outcome is not a good one here"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    outcomes: Counter[tuple[str, str]] = Counter()
    with tempfile.TemporaryDirectory(prefix="mrs-damage-") as scratch:
        root = Path(scratch)
        pristine = pristine_journal(root / "pristine")
        for index in range(args.trials):
            kind = KINDS[index % len(KINDS)]
            damaged = bytes(damage(bytearray(pristine), kind, rng))
            outcome, detail = trial(root / f"t{index}", damaged)
            if args.keep is not None and outcome not in GOOD_OUTCOMES:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"t{index}-{kind}-data.mdb").write_bytes(damaged)
            outcomes[(kind, outcome)] += 1
            print(f"trial {index:2} {kind:12} {outcome:20} {detail}", flush=True)
            shutil.rmtree(root / f"t{index}")
    print("\noutcome by kind:")
    for (kind, outcome), count in sorted(outcomes.items()):
        print(f"  {kind:12} {outcome:20} {count}")
    totals = Counter()
    for (_, outcome), count in outcomes.items():
        totals[outcome] += count
    print("totals: " + ", ".join(f"{name} {count}" for name, count in sorted(totals.items())))
    bad = ("silent loss", "stranded", "failing", "refused-unexplained", "refused, verify intact")
    return 1 if any(totals[outcome] for outcome in bad) else 0


if __name__ == "__main__":
    sys.exit(main())
