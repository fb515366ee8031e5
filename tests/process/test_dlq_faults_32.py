"""`mrs dlq-handler` under faults of the links it forwards across (thirty-second
session), against real group processes behind a fault proxy. Each test says what was
wrong before its fix."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from sim.bus import LinkedBus
from tests.process.test_links import wait_for_link

ROOT = Path(__file__).resolve().parents[2]
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "SENDER"
"""
WAIT_S = 60.0


def _handler_command(bus: LinkedBus, rules: Path) -> list[str]:
    return [
        sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path),
        "--group", "1", "--address", bus.address(1), "--json", str(rules),
    ]  # fmt: skip


@pytest.fixture
async def linked(tmp_path, nursery):
    """Groups 1 and 2 behind a fault proxy, their link up, and one memory dead letter
    on group 1's DLQ."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_for_link(bus, 1, 2)
        async with bus.connect(1, "SENDER") as sender:
            psb = await sender.put(
                b"letter", target="1.50", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ
            )
        assert psb.uma_status == Status.DLQ_SUCCESS
        yield bus
    finally:
        bus.stop()


def _rules(bus: LinkedBus, retry_interval_s: int) -> Path:
    rules = bus.directory / "rules.txt"
    rules.write_text(
        f"RETRYINT({retry_interval_s}) WAIT(NO)\nACTION(FWD) FWDQ(IN) FWDQM(2) RETRY(30)\n"
    )
    return rules


async def test_a_memory_letter_whose_link_dropped_on_its_way_is_repeated_marked(
    linked: LinkedBus,
) -> None:
    """A memory dead letter forwarded to group 2 reaches it, and the link drops before
    group 2's answer comes back: group 1 answers the put LINK_DOWN/DISC_SUCCESS. The
    handler took that as "nothing stored" and put the letter again RETRYINT later,
    unmarked: the receiver got it twice, neither copy flagged. Now a put answered
    LINK_DOWN may have a copy there, so the repeat carries the possible-duplicate mark."""
    linked.proxy(1, 2).blackhole("backward")  # group 2's answers are lost
    copies = []
    done: list[subprocess.CompletedProcess] = []

    async def run_handler() -> None:
        command = _handler_command(linked, _rules(linked, 1))
        done.append(await trio.run_process(command, capture_stdout=True, cwd=ROOT, check=False))

    async with trio.open_nursery() as running:
        running.start_soon(run_handler)
        with trio.fail_after(WAIT_S):
            async with linked.connect(2, "IN") as receiver:
                copies.append(await receiver.get(timeout=WAIT_S))  # there; unanswered
                linked.proxy(1, 2).heal()  # the link drops with the put on its way
                copies.append(await receiver.get(timeout=WAIT_S))  # the repeat
    [finished] = done
    assert finished.returncode == 0
    lines = [json.loads(line) for line in finished.stdout.decode().splitlines()]
    outcomes = [(line["outcome"], line["detail"]) for line in lines if "seq" in line]
    assert outcomes[0] == ("failed", "not stored: LINK_DOWN/DISC_SUCCESS"), outcomes
    assert outcomes[-1][0] == "forwarded", outcomes
    first, repeat = copies
    assert first.body == repeat.body == b"letter"
    assert (repeat.headers or {}).get("possible_duplicate") is True, repeat.headers


async def test_a_letter_answered_link_down_comes_back_possdupl_after_a_sigkill(
    linked: LinkedBus,
) -> None:
    """The same LINK_DOWN answer, and the handler is SIGKILLed while the letter waits
    for its next RETRYINT: the group took the answer as "no copy kept" and gave the
    letter back as it was (CONFIRMREQ), so the next run's put of it went unmarked
    beside the copy group 2 already held. Now it comes back POSSDUPL."""
    linked.proxy(1, 2).blackhole("backward")
    command = _handler_command(linked, _rules(linked, 600))
    handler = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        with trio.fail_after(WAIT_S):
            async with linked.connect(2, "IN") as receiver:
                await receiver.get(timeout=WAIT_S)  # there; unanswered
            linked.proxy(1, 2).heal()
            line = await trio.to_thread.run_sync(handler.stdout.readline)
        assert json.loads(line)["detail"] == "not stored: LINK_DOWN/DISC_SUCCESS", line
    finally:
        handler.send_signal(signal.SIGKILL)
        handler.wait()
        handler.stdout.close()
    async with linked.connect(1, "DLQ") as dlq:
        letter = await dlq.get(timeout=WAIT_S)
    assert letter.body == b"letter"
    assert letter.delivery_status == Status.POSSDUPL
