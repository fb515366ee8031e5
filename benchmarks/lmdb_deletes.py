"""Deleting a commit's confirmed messages: `txn.delete` per key against one cursor.

Why: a busy server's commit deletes a few hundred DQF records (and their index keys
and delivery marks), mostly neighbours, since consumers confirm in about the order
they got. `txn.delete(key)` searches from the root every time; a cursor that is
already on the right leaf page finds the next key there (journals.store.apply_batches
keeps one per database for the whole commit).

    python benchmarks/lmdb_deletes.py --records 200000

Fills a scratch LMDB with `--records` 1.1 KiB values under 12-byte keys (a queue id
and a seq, as the DQF's), then deletes them from the front in commits of 200,
alternating the two ways, and prints µs per deleted key for each. No fsync (the
flush is the same either way; this is the CPU of finding and unlinking the keys).
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time

import lmdb

KEY = struct.Struct(">IQ")
PER_COMMIT = 200
COMMITS_PER_ROUND = 100


def _delete_round(env: lmdb.Environment, db: object, first: int, cursor_way: bool) -> float:
    """Delete PER_COMMIT x COMMITS_PER_ROUND keys from `first` on; µs per key."""
    started = time.perf_counter()
    seq = first
    for _ in range(COMMITS_PER_ROUND):
        with env.begin(write=True) as txn:
            if cursor_way:
                cursor = txn.cursor(db=db)
                for offset in range(PER_COMMIT):
                    if cursor.set_key(KEY.pack(10, seq + offset)):
                        cursor.delete()
            else:
                for offset in range(PER_COMMIT):
                    txn.delete(KEY.pack(10, seq + offset), db=db)
        seq += PER_COMMIT
    return 1e6 * (time.perf_counter() - started) / (PER_COMMIT * COMMITS_PER_ROUND)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    needed = 2 * args.rounds * PER_COMMIT * COMMITS_PER_ROUND
    if args.records < needed:
        parser.error(f"--records must be at least {needed} for {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as scratch:
        env = lmdb.open(scratch, map_size=4 << 30, sync=False, max_dbs=2)
        db = env.open_db(b"dqf")
        with env.begin(write=True) as txn:
            txn.cursor(db=db).putmulti(
                ((KEY.pack(10, seq), b"x" * 1100) for seq in range(args.records)), append=True
            )
        results: dict[str, list[float]] = {"txn_delete_us": [], "cursor_us": []}
        first = 0
        for _ in range(args.rounds):
            for name, cursor_way in (("txn_delete_us", False), ("cursor_us", True)):
                results[name].append(round(_delete_round(env, db, first, cursor_way), 2))
                first += PER_COMMIT * COMMITS_PER_ROUND
        env.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
