"""A SAF drain into a full remote DQF: link messages sent per message delivered.

Two real `mrs serve` groups (sim.bus.LinkedBus: the link 1 -> 2 through a FaultProxy
on 127.0.0.1). Group 2's DQF holds `--dqf-max` messages (50); a producer on group 1
puts WF_DQF (UMA SAF) to queue 2.10 at `--put-rate` (50/s); a consumer on group 2
gets and confirms one message every `--confirm-ms` (30 ms). The consumer is slower
than the producer, so group 2's DQF stays full, the drain is refused DQF_FULL and
waits for room, and the SAF backlog grows. Each phase reports group 1's link
`messages_sent` + `messages_resent` (`mrs_link_messages_sent_total` and
`mrs_link_messages_resent_total`: every link message) per message group 2
stored from the link (the consumer got it, or it is still in group 2's DQF: the
DQF's depth at the phase's end less at its start), what the consumer got, and the
WARNING lines both groups logged:

  fill    from an empty DQF until (and while) it fills up: the drain's first refusal
  full    the DQF full all along (the drain waits for room, RETRY)
  cut     the link cut through the proxy for `--cut-s`, then healed
  backlog the producer stopped: the consumer drains what is left

Run it from the repository (a few seconds per phase):

  .venv/bin/python benchmarks/drain_resends.py
  .venv/bin/python benchmarks/drain_resends.py --full-s 20 --cut-s 3 --backlog-s 10

`measure()` is what tests/process/test_drain_resends.py runs (shorter).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import trio

from clients import DeliveryMode, NoMoreMessages, Uma
from mrs.tools.cli_support import OneLineParser, positive_float, positive_int
from sim.bus import LinkedBus

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
"""
LINK_WAIT_S = 20.0


@dataclass
class Phase:
    """One phase's counts: link messages group 1 sent, messages group 2 stored in its
    DQF from the link (got by the consumer, or still in the DQF) and delivered to the
    consumer, WARNING lines both groups logged."""

    name: str
    seconds: float
    sent: int = 0
    stored: int = 0
    delivered: int = 0
    warnings: int = 0

    @property
    def ratio(self) -> float:
        return self.sent / self.stored if self.stored else float("inf")


@dataclass
class Run:
    phases: list[Phase] = field(default_factory=list)
    put: int = 0
    delivered_seqs: list[int] = field(default_factory=list)
    put_seqs: list[int] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return sum(phase.sent for phase in self.phases)

    @property
    def stored(self) -> int:
        return sum(phase.stored for phase in self.phases)


async def _link_info(bus: LinkedBus) -> dict:
    async with bus.connect(1, None) as client:
        return (await client.status())["links"]["2"]


async def _dqf_messages(bus: LinkedBus) -> int:
    async with bus.connect(2, None) as client:
        return int((await client.status())["dqf_messages"])


async def _wait_link_up(bus: LinkedBus) -> None:
    """Poll group 1's status (another process's state: nothing to await)."""
    with trio.fail_after(LINK_WAIT_S):
        while (await _link_info(bus))["state"] != "up":
            await trio.sleep(0.05)


def _warnings(bus: LinkedBus) -> int:
    """The WARNING lines of both groups about the link and its messages. Not counted:
    the receiver's DQF at its bound (mrs.ops.bound_log), said once per time it fills,
    which this scenario makes it do on purpose."""
    count = 0
    for group_id in (1, 2):
        log_path = bus.directory / f"group{group_id}.log"
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        lines = text.splitlines()
        count += sum(1 for line in lines if "WARNING" in line and "mrs.ops:" not in line)
    return count


async def _produce(bus: LinkedBus, run: Run, rate_per_s: float, stop: trio.Event) -> None:
    async with bus.connect(1, "OUT") as sender:
        period_s = 1.0 / rate_per_s
        deadline = trio.current_time()
        while not stop.is_set():
            psb = await sender.put(
                b"p%08d" % run.put, target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF
            )
            run.put += 1
            run.put_seqs.append(psb.seq)
            deadline += period_s
            await trio.sleep_until(max(deadline, trio.current_time()))


async def _consume(bus: LinkedBus, run: Run, confirm_s: float, stop: trio.Event) -> None:
    async with bus.connect(2, "IN") as receiver:
        while not stop.is_set():
            try:
                message = await receiver.get(timeout=0.2)
            except (NoMoreMessages, TimeoutError):
                continue
            await receiver.confirm(message.seq)
            run.delivered_seqs.append(message.seq)
            await trio.sleep(confirm_s)


def _link_messages(link: dict) -> int:
    """Every message the link sent: first sends and resends (counted apart)."""
    return int(link["messages_sent"]) + int(link.get("messages_resent", 0))


async def _phase(bus: LinkedBus, run: Run, name: str, seconds: float) -> Phase:
    phase = Phase(name, seconds)
    sent_before, dqf_before = _link_messages(await _link_info(bus)), await _dqf_messages(bus)
    delivered_before, warnings_before = len(run.delivered_seqs), _warnings(bus)
    if name == "cut":
        bus.proxy(1, 2).cut()
        await trio.sleep(seconds / 2)
        bus.proxy(1, 2).heal()
        await _wait_link_up(bus)
        await trio.sleep(seconds / 2)
    else:
        await trio.sleep(seconds)
    phase.sent = _link_messages(await _link_info(bus)) - sent_before
    phase.delivered = len(run.delivered_seqs) - delivered_before
    phase.stored = phase.delivered + await _dqf_messages(bus) - dqf_before
    phase.warnings = _warnings(bus) - warnings_before
    return phase


async def measure(
    directory: Path,
    fill_s: float = 3.0,
    full_s: float = 8.0,
    cut_s: float = 3.0,
    backlog_s: float = 4.0,
    dqf_max: int = 50,
    put_rate_per_s: float = 50.0,
    confirm_ms: float = 30.0,
) -> Run:
    """Run the scenario on real processes in `directory`; the counts of each phase.
    `messages_sent` and `messages_resent` count every link message since the link's
    first connection (a cut and heal keep the session), so the phases' deltas add up."""
    bus = LinkedBus(directory, queues=QUEUES, group_limits={2: f"dqf_messages_max = {dqf_max}"})
    run = Run()
    async with trio.open_nursery() as nursery:
        await bus.start_proxies(nursery)
        await trio.to_thread.run_sync(bus.start)
        try:
            await _wait_link_up(bus)
            stop_producer, stop_consumer = trio.Event(), trio.Event()
            nursery.start_soon(_produce, bus, run, put_rate_per_s, stop_producer)
            nursery.start_soon(_consume, bus, run, confirm_ms / 1000, stop_consumer)
            run.phases.append(await _phase(bus, run, "fill", fill_s))
            run.phases.append(await _phase(bus, run, "full", full_s))
            if cut_s > 0:
                run.phases.append(await _phase(bus, run, "cut", cut_s))
            stop_producer.set()
            if backlog_s > 0:
                run.phases.append(await _phase(bus, run, "backlog", backlog_s))
            stop_consumer.set()
        finally:
            bus.stop()
            nursery.cancel_scope.cancel()
    return run


def main() -> None:
    parser = OneLineParser(prog="drain_resends.py", description=__doc__.splitlines()[0])
    parser.add_argument("--fill-s", type=positive_float, default=3.0)
    parser.add_argument("--full-s", type=positive_float, default=20.0)
    parser.add_argument("--cut-s", type=positive_float, default=4.0)
    parser.add_argument("--backlog-s", type=positive_float, default=6.0)
    parser.add_argument("--dqf-max", type=positive_int, default=50)
    parser.add_argument("--put-rate", type=float, default=50.0)
    parser.add_argument("--confirm-ms", type=float, default=30.0)
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drain-resends-") as scratch:
        run = trio.run(
            measure,
            Path(scratch) / "bus",
            args.fill_s,
            args.full_s,
            args.cut_s,
            args.backlog_s,
            args.dqf_max,
            args.put_rate,
            args.confirm_ms,
        )
    rows = [
        {
            "phase": phase.name,
            "seconds": phase.seconds,
            "link_messages_sent": phase.sent,
            "stored": phase.stored,
            "delivered": phase.delivered,
            "sent_per_stored": round(phase.ratio, 3),
            "warnings": phase.warnings,
        }
        for phase in run.phases
    ]
    if args.json:
        print(json.dumps({"phases": rows, "put": run.put}, indent=2))
        return
    print(
        f"{'phase':8} {'s':>5} {'sent':>10} {'stored':>8} {'got':>8} {'sent/stored':>12} "
        f"{'warnings':>9}"
    )
    for row in rows:
        print(
            f"{row['phase']:8} {row['seconds']:5.1f} {row['link_messages_sent']:10,} "
            f"{row['stored']:8,} {row['delivered']:8,} {row['sent_per_stored']:12.3f} "
            f"{row['warnings']:9}"
        )
    total = run.sent / run.stored if run.stored else float("inf")
    print(f"total: {run.sent:,} link messages sent, {run.stored:,} stored, {total:.3f} per message")
    in_order = run.delivered_seqs == sorted(run.delivered_seqs)
    print(f"put {run.put:,}; delivered in order: {in_order}")


if __name__ == "__main__":
    main()
