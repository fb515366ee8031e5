"""A DLQ as faithful as IBM MQ's: Encoding/CodedCharSetId, PutApplName = the group when
MRS redirected it, attachable as PAMS_DEAD_LETTER_QUEUE, and recoverable when asked."""

from __future__ import annotations

from clients import Address, DeliveryMode, Status, Uma

MODE = DeliveryMode


async def test_attach_by_messageq_name_and_header_fields(mem_bus) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="PAMS_DEAD_LETTER_QUEUE") as dlq,
    ):
        assert dlq.queue == Address(1, 96)
        psb = await sender.put(b"x", target="1.50", delivery=MODE.WF_MEM, uma=Uma.DLQ)
        assert psb.uma_status == Status.DLQ_SUCCESS
        header = (await dlq.get(timeout=5)).dead_letter_header
    assert (header["encoding"], header["coded_char_set_id"], header["format"]) == (
        546,
        1208,
        "MRS",
    )
    assert header["put_appl_name"] == "NYC"  # the group redirected it, not the application
    async with mem_bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"y", target="PAMS_DEAD_LETTER_QUEUE", delivery=MODE.WF_MEM)
        assert psb.delivery_status.ok


async def test_recoverable_dlq_survives_sigkill(make_bus) -> None:
    bus = make_bus(group_extra="dead_letter_queue_recoverable = true")
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(
            b"keep me", target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ, correlation_id=b"c1"
        )
        assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DLQ_SUCCESS)
        memory = await sender.put(b"and me", target="1.50", delivery=MODE.WF_MEM, uma=Uma.DLQ)
        assert memory.uma_status == Status.DLQ_SUCCESS
    bus.restart()  # SIGKILL
    async with bus.connect(queue="DLQ") as dlq:
        first = await dlq.get(timeout=5)
        second = await dlq.get(timeout=5)
        for message in (first, second):
            await dlq.confirm(message.seq)
    assert sorted([first.body, second.body]) == [b"and me", b"keep me"]
    kept = first if first.body == b"keep me" else second
    assert kept.correlation_id == b"c1" and str(kept.source) == "1.13"
    assert kept.dead_letter_header["reason"] == 2085
    assert kept.dead_letter_header["put_appl_name"] == "NYC"
    bus.restart()
    async with bus.connect(queue="DLQ") as dlq:  # confirmed means gone for good
        assert (await dlq.status())["queues"]["1.96"]["pending"] == 0


def test_a_queue_cannot_take_the_messageq_dlq_name(tmp_path) -> None:
    import pytest

    from mrs.config.bus import ConfigError, load_config

    config = tmp_path / "bus.toml"
    config.write_text(
        '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
        '[[group.queue]]\nid = 10\nname = "PAMS_DEAD_LETTER_QUEUE"\n'
    )
    with pytest.raises(ConfigError, match="belongs to the dead letter queue"):
        load_config(config)


async def test_handler_on_a_recoverable_dlq_keeps_dead_letters_out_of_the_pcj(make_bus) -> None:
    from journals import Journal, JournalStore
    from tests.process.test_dlq_handler import run_handler

    bus = make_bus(group_extra="dead_letter_queue_recoverable = true\npcj_default = true")
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"x", target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ)
        assert psb.uma_status == Status.DLQ_SUCCESS
    handler, events = await run_handler(bus, "ACTION(DISCARD)\n")
    assert [event["outcome"] for event in events] == ["discarded"]
    store = JournalStore(bus.data_dir / "journals", readonly=True)
    try:
        assert store.count(Journal.PCJ) == 0 and store.count(Journal.DQF) == 0
    finally:
        store.close()
