"""The DLQ answers to the name MessageQ's default group configuration gives queue 96,
`dead_letter_queue` (shared/reference), as it does to PAMS_DEAD_LETTER_QUEUE: a program
ported from MessageQ that locates or attaches it by that name was told NOSUCHQUEUE. A
queue a bus file declares under the name keeps it."""

from __future__ import annotations

from clients import Address, DeliveryMode
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES

DECLARED = """
[[group.queue]]
id = 20
name = "dead_letter_queue"
confirm = "explicit-out-of-order"
"""

MODE = DeliveryMode


async def test_locate_attach_and_put_by_messageq_default_name(mem_bus) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="dead_letter_queue") as dlq,
    ):
        assert dlq.queue == Address(1, 96)
        assert await sender.locate("dead_letter_queue") == Address(1, 96)
        psb = await sender.put(b"x", target="dead_letter_queue", delivery=MODE.WF_MEM)
        assert psb.delivery_status.ok
        assert (await dlq.get(timeout=5)).body == b"x"


async def test_a_declared_queue_of_that_name_is_that_queue(make_mem_bus) -> None:
    group = await make_mem_bus(queues=STANDARD_QUEUES + DECLARED)
    async with group.connect(queue="dead_letter_queue") as declared:
        assert declared.queue == Address(1, 20)
        assert await declared.locate("PAMS_DEAD_LETTER_QUEUE") == Address(1, 96)


def test_the_dlq_handler_takes_the_name_as_its_input_and_refuses_it_as_a_loop(
    tmp_path,
) -> None:
    """The DLQ handler reads `dead_letter_queue` as the group's DLQ too: INPUTQ takes
    it, and FWDQ with a blank FWDQM is refused as a loop (before, INPUTQ refused it,
    and `--check` without `--config` took the loop)."""
    rules = tmp_path / "t.rules"
    rules.write_text("INPUTQ(dead_letter_queue) WAIT(NO)\nACTION(IGNORE)\n")
    assert run_mrs("dlq-handler", str(rules), "--check").returncode == 0
    rules.write_text("ACTION(FWD) FWDQ(dead_letter_queue)\n")
    looped = run_mrs("dlq-handler", str(rules), "--check")
    assert looped.returncode == 2 and "FWDQ(dead_letter_queue)" in looped.stderr, looped
