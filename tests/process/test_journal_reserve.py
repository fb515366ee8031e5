"""A full journal never wedges the group: new messages are refused (MRS_RES_EXH, with
their UMA) while deliveries, confirms (with their PCJ records) and deletes still
succeed, and a group stopped full starts and drains. Real processes, a real small map."""

from __future__ import annotations

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect

LIMITS = "journal_bytes_max = 4194304\nmessage_bytes_max = 65536"
BODY_BYTES = 40_000


async def _fill_until_refused(address: str) -> list[int]:
    stored = []
    async with connect(address, queue="SENDER") as sender:
        for index in range(400):
            psb = await sender.put(
                b"%06d" % index + b"x" * BODY_BYTES,
                target="ORDERS",
                delivery=DeliveryMode.WF_DQF,
                uma=Uma.DISC,
            )
            if psb.delivery_status != Status.STORED:
                assert (psb.delivery_status, psb.uma_status) == (
                    Status.MRS_RES_EXH,
                    Status.DISC_SUCCESS,
                )
                return stored
            stored.append(psb.seq)
    raise AssertionError("the journal never refused a put")


async def _drain(address: str) -> list[int]:
    got = []
    async with connect(address, queue="ORDERS") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                return got
            got.append(message.seq)
            await receiver.confirm(message.seq)  # pcj_default: a PCJ record per confirm


async def test_a_full_journal_refuses_new_messages_and_still_drains(make_bus) -> None:
    bus = make_bus(group_extra="pcj_default = true", limits=LIMITS)
    stored = await _fill_until_refused(bus.address)
    assert len(stored) > 40
    assert await _drain(bus.address) == stored
    assert "within its reserve" in bus.log_text()


async def test_a_group_stopped_with_a_full_journal_starts_and_drains(make_bus) -> None:
    bus = make_bus(group_extra="pcj_default = true", limits=LIMITS)
    stored = await _fill_until_refused(bus.address)
    bus.kill()
    address = bus.start()
    assert await _drain(address) == stored
    # The PCJ now holds (nearly) everything: the journal is still full for new
    # messages, and refuses them at once instead of wedging.
    assert len(await _fill_until_refused(address)) < 5
    assert "Traceback" not in bus.log_text()
