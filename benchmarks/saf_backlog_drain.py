"""A large SAF backlog drained after a cut heals, while producers keep putting.

Two real `mrs serve` groups (sim.bus.LinkedBus: the link 1 -> 2 through a FaultProxy
on 127.0.0.1), 1 KiB bodies:

  reference  group 2's own durable put rate: WF_DQF puts to 2.9 on group 2 itself,
             `--batches` put_many calls of `--batch` in flight (the fastest way a client
             stores on group 2), for `--reference-s`
  fill       the link cut; `--backlog` WF_DQF (UMA SAF) puts to 2.10 through group 1,
             stored in group 1's SAF journal (put_many, same shape)
  drain      the link healed; a producer keeps putting to 2.10 through group 1 at
             `--live-rate` per second while the backlog drains; the drain ends when
             group 2's DQF holds the whole backlog (FIFO: the backlog arrives before
             any live put made after the heal)

`--cut receiver` cuts the link by stopping group 2 instead (SIGTERM) and heals it by
starting group 2 again, with the link dialing group 2 directly: no fault proxy copies
the link's bytes in this process. The drain is timed from group 2's READY (its
recovery of the reference's messages is not the drain's work).

The figure issue 52 asks for is the drain's rate (backlog messages ÷ heal-to-empty
seconds) as a fraction of the reference rate; the goal is >= 0.8. The run checks at the
end that group 2's DQF holds every message put (backlog + live), so a fast drain that
lost something shows up as a failure, not a figure.

  .venv/bin/python benchmarks/saf_backlog_drain.py                       # 1,000,000
  .venv/bin/python benchmarks/saf_backlog_drain.py --backlog 100000      # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio
from procstat import process_cpu_s  # the sibling module (benchmarks/ is on sys.path)

from clients import DeliveryMode, PutItem, Uma
from mrs.tools.cli_support import OneLineParser, positive_float, positive_int
from sim.bus import LinkedBus

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 9
name = "REF"
confirm = "explicit-out-of-order"
"""
LIMITS = """
dqf_messages_max = 4000000
saf_messages_max = 4000000
journal_bytes_max = 17179869184
"""
REFERENCE_QUEUE = "2.9"
"""Below the drain's queue (2.10) in the DQF's key order, so that each fills its
pages as the last queue does: the journal appends a queue's records only while its
keys are the largest (journals.store), and a queue below another one's records
splits its pages in half. With the reference in 2.12 the drain wrote 2.3 KB per
message into half-full pages against the reference's 1.2 KB (benchmarks/README.md)."""
LINK_WAIT_S = 30.0
POLL_S = 0.5
DRAIN_POLL_S = 0.05
"""How often the drain's end is looked for: its time is known to this much (a 0.5 s
poll was 15% of a 200,000 drain's 3-4 s here)."""
BODY = b"x" * 1024


@dataclass
class Figures:
    reference_per_s: float = 0.0
    reference_put: int = 0
    fill_per_s: float = 0.0
    drain_s: float = 0.0
    drained: int = 0
    live_put: int = 0
    group2_dqf: int = 0
    timeline: list[tuple[float, int]] | None = None
    reference_cpu_us: float = 0.0
    """Group 2's CPU per message of its own puts (µs): load-robust, unlike rates."""
    drain_cpu_us: dict[int, float] | None = None
    """Each group's CPU per drained message (µs)."""
    harness_cpu_us: float = 0.0
    """This process's CPU per message moved (µs): the fault proxy that carries every
    byte of the link, and the live producer. It shares the two cores with the groups."""
    link_sent: int = 0
    """Messages group 1's link sent during the drain (resends included)."""
    drain_commits: dict[int, tuple[int, float]] | None = None
    """Each group's commits during the drain and their mean time (ms)."""

    @property
    def drain_per_s(self) -> float:
        return self.drained / self.drain_s if self.drain_s else 0.0


async def _status(bus: LinkedBus, group_id: int) -> dict:
    async with bus.connect(group_id, None) as client:
        return await client.status()


def _cpu_s(bus: LinkedBus, group_id: int) -> float:
    process = bus.processes[group_id].process
    assert process is not None, "the group is not running"
    return process_cpu_s(process.pid)


async def _dqf_messages(bus: LinkedBus, group_id: int) -> int:
    return int((await _status(bus, group_id))["dqf_messages"])


async def _saf_backlog(bus: LinkedBus) -> int:
    return int((await _status(bus, 1))["links"]["2"].get("saf_backlog", 0))


async def _wait_link_up(bus: LinkedBus) -> None:
    """Poll group 1's status (another process's state: nothing to await)."""
    with trio.fail_after(LINK_WAIT_S):
        while (await _status(bus, 1))["links"]["2"]["state"] != "up":
            await trio.sleep(0.05)


async def _put_batches(
    bus: LinkedBus, group_id: int, target: str, total: int, batch: int, batches: int
) -> float:
    """`total` WF_DQF (UMA SAF) puts through `group_id`, `batches` put_many calls of
    `batch` in flight; puts per second. Every PSB must be a success."""
    items = [PutItem(BODY, target, DeliveryMode.WF_DQF, Uma.SAF) for _ in range(batch)]
    remaining = [total]
    started = time.perf_counter()

    async def lane(client) -> None:
        while remaining[0] > 0:
            count = min(batch, remaining[0])
            remaining[0] -= count
            results = await client.put_many(items[:count])
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise RuntimeError(f"{len(failed)} puts refused: {failed[0]}")

    async with bus.connect(group_id, "OUT") as client, trio.open_nursery() as nursery:
        for _ in range(batches):
            nursery.start_soon(lane, client)
    return total / (time.perf_counter() - started)


async def _reference(bus: LinkedBus, figures: Figures, seconds: float, batch: int, batches: int):
    """Group 2's own put rate over about `seconds`, sized by a short first probe (which
    also warms the group up and is not counted in the rate)."""
    probe_count = batch * batches * 4
    probe_per_s = await _put_batches(bus, 2, REFERENCE_QUEUE, probe_count, batch, batches)
    count = max(probe_count, int(probe_per_s * seconds))
    cpu_before_s = _cpu_s(bus, 2)
    figures.reference_per_s = await _put_batches(bus, 2, REFERENCE_QUEUE, count, batch, batches)
    figures.reference_cpu_us = (_cpu_s(bus, 2) - cpu_before_s) / count * 1e6
    figures.reference_put = probe_count + count


async def _live_producer(bus: LinkedBus, figures: Figures, rate_per_s: float) -> None:
    async with bus.connect(1, "OUT") as sender:
        period_s = 1.0 / rate_per_s
        deadline = trio.current_time()
        while True:
            await sender.put(BODY, target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
            figures.live_put += 1
            deadline += period_s
            await trio.sleep_until(max(deadline, trio.current_time()))


async def _writer(bus: LinkedBus, group_id: int) -> tuple[int, float]:
    writer = (await _status(bus, group_id))["writer"]
    return int(writer["commits"]), float(writer["commit_time_ms_mean"]) * int(writer["commits"])


async def _heal(bus: LinkedBus, cut: str) -> None:
    if cut == "proxy":
        bus.proxy(1, 2).heal()
    else:
        await trio.to_thread.run_sync(bus.processes[2].start)


async def _drain(
    bus: LinkedBus, figures: Figures, backlog: int, live_rate: float, cut: str
) -> None:
    timeline: list[tuple[float, int]] = []
    await _heal(bus, cut)  # a stopped receiver's start-up is not timed (READY first)
    before = {group_id: await _writer(bus, group_id) for group_id in (1, 2)}
    cpu_before_s = {group_id: _cpu_s(bus, group_id) for group_id in (1, 2)}
    harness_before_s = time.process_time()
    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        if live_rate > 0:
            nursery.start_soon(_live_producer, bus, figures, live_rate)
        # FIFO: the backlog reaches group 2 before any live put made after the heal,
        # so it has drained once group 2 holds it (the reference puts sit in 2.9).
        while (stored := await _dqf_messages(bus, 2) - figures.reference_put) < backlog:
            timeline.append((time.perf_counter() - started, stored))
            await trio.sleep(DRAIN_POLL_S)
        figures.drain_s = time.perf_counter() - started
        moved = backlog + figures.live_put
        figures.drain_cpu_us = {
            group_id: (_cpu_s(bus, group_id) - cpu_before_s[group_id]) / moved * 1e6
            for group_id in (1, 2)
        }
        figures.harness_cpu_us = (time.process_time() - harness_before_s) / moved * 1e6
        nursery.cancel_scope.cancel()
    figures.link_sent = _link_messages((await _status(bus, 1))["links"]["2"]) - figures.link_sent
    figures.drain_commits = {}
    for group_id in (1, 2):
        commits, total_ms = await _writer(bus, group_id)
        commits -= before[group_id][0]
        total_ms -= before[group_id][1]
        figures.drain_commits[group_id] = (commits, total_ms / commits if commits else 0.0)
    figures.drained = backlog
    figures.timeline = timeline


def _link_messages(link: dict) -> int:
    """Every message the link sent: first sends and resends (counted apart)."""
    return int(link["messages_sent"]) + int(link.get("messages_resent", 0))


async def measure(directory: Path, args: argparse.Namespace) -> Figures:
    bus = LinkedBus(directory, queues=QUEUES, limits=LIMITS, direct=args.cut == "receiver")
    figures = Figures()
    async with trio.open_nursery() as nursery:
        await bus.start_proxies(nursery)
        await trio.to_thread.run_sync(bus.start)
        try:
            await _wait_link_up(bus)
            await _reference(bus, figures, args.reference_s, args.batch, args.batches)
            figures.link_sent = _link_messages((await _status(bus, 1))["links"]["2"])
            if args.cut == "proxy":
                bus.proxy(1, 2).cut()
            else:
                await trio.to_thread.run_sync(bus.processes[2].terminate)
            figures.fill_per_s = await _put_batches(
                bus, 1, "2.10", args.backlog, args.batch, args.batches
            )
            assert await _saf_backlog(bus) == args.backlog, "the backlog is not all in SAF"
            await _drain(bus, figures, args.backlog, args.live_rate, args.cut)
            # The live puts were answered once in group 1's SAF (SAF_FORCED behind the
            # backlog): the check waits until they have reached group 2 too.
            with trio.fail_after(LINK_WAIT_S):
                while await _saf_backlog(bus) > 0:
                    await trio.sleep(POLL_S)
            figures.group2_dqf = await _dqf_messages(bus, 2)
        finally:
            bus.stop()
            nursery.cancel_scope.cancel()
    return figures


def main() -> None:
    parser = OneLineParser(prog="saf_backlog_drain.py", description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=positive_int, default=1_000_000)
    parser.add_argument("--reference-s", type=positive_float, default=5.0)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--batches", type=int, default=4, help="put_many calls in flight")
    parser.add_argument("--live-rate", type=float, default=1000.0, help="puts/s during drain")
    parser.add_argument("--scratch", type=Path, default=None, help="where the bus lives")
    parser.add_argument(
        "--cut",
        choices=("proxy", "receiver"),
        default="proxy",
        help="cut the link at its fault proxy, or by stopping group 2 (no proxy)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="saf-backlog-", dir=args.scratch) as scratch:
        figures = trio.run(measure, Path(scratch) / "bus", args)
    print(f"reference: group 2's own WF_DQF puts   {figures.reference_per_s:12,.0f} /s")
    print(f"reference: group 2's CPU per put       {figures.reference_cpu_us:12.1f} µs")
    print(f"fill: puts into group 1's SAF (cut)    {figures.fill_per_s:12,.0f} /s")
    print(
        f"drain: {figures.drained:,} in {figures.drain_s:.1f} s  "
        f"{figures.drain_per_s:12,.0f} /s = {figures.drain_per_s / figures.reference_per_s:.2f}"
        f" x reference; {figures.live_put:,} live puts meanwhile"
    )
    moved = figures.drained + figures.live_put
    print(f"drain: link messages sent {figures.link_sent:,} for {moved:,} moved")
    for group_id, (commits, mean_ms) in (figures.drain_commits or {}).items():
        cpu_us = (figures.drain_cpu_us or {}).get(group_id, 0.0)
        print(
            f"drain: group {group_id} made {commits:,} commits, mean {mean_ms:.3f} ms; "
            f"{cpu_us:.1f} µs CPU per message moved"
        )
    print(
        f"drain: this process (the link's fault proxy, the live producer) "
        f"{figures.harness_cpu_us:.1f} µs CPU per message moved"
    )
    expected = figures.reference_put + figures.drained + figures.live_put
    print(f"group 2 DQF after: {figures.group2_dqf:,}; put and answered: {expected:,}")
    if not expected <= figures.group2_dqf <= expected + 1:  # + the live put cut off unanswered
        raise SystemExit("group 2's DQF does not hold every message put")


if __name__ == "__main__":
    main()
