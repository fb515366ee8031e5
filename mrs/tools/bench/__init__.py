"""`mrs bench`: durable throughput, measured against what the disk itself can do.

A durable put can never be cheaper than the disk's flush, so a bare "puts/s" figure
says little by itself: it changes tenfold between a laptop SSD, a cloud volume and
tmpfs. This module measures, in one run and on one directory of one disk:

1. raw fsync/s: write one byte and `os.fsync` it, in a loop (the disk's ceiling for
   anything that waits for its own flush);
2. LMDB synced commits/s: one 1 KiB put per write transaction through
   `JournalStore.commit_now` (what one-commit-per-message storage would give);
3. recoverable WF_DQF puts/s through a real `mrs serve` process, for each client
   count asked for (each client its own connection, one put at a time), plus a
   pipelined run of 4 connections x 32 tasks in flight on each;
   AK_DQF puts in the pipelined shape: 4 connections x 32 tasks, each putting and
   then getting one MRS_ACK (so at most 32 puts per connection unacknowledged),
   compared with the pipelined WF_DQF row (the AK row's "x the WF_DQF puts" line);
4. the same 32-client WF_DQF puts across a link: clients on group 1, target queue
   in group 2 (two real servers, the link through a `FaultProxy`, as `LinkedBus`
   builds them), with group 2's messages per commit;
5. put -> get -> confirm end to end: 4 x 32 WF_DQF producers and one consumer
   connection with 32 get+confirm loops in flight, counting the messages confirmed
   within the window, once with the target queue in group 1 and once in group 2.

Every figure is then reported as a ratio to (1) and (2), and each cross-group
figure also as a ratio to its same-group counterpart from the same run: group
commit is what lets the server exceed the disk, and the ratios are what carry over
from one machine to another. Each server run starts on a fresh data directory, so
every run begins with an empty DQF.
"""

from mrs.tools.bench.command import run_bench

__all__ = ["run_bench"]
