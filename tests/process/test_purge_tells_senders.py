"""A purge tells the senders still waiting on the purged messages, on a real server.

A WF_CONF put waits for its receiver's confirm, a WF_DEQ put for its get, an AK_CONF
put is owed an MRS_ACK: when an operator purges the queue (`mrs admin purge`, the web
page), each is answered at once as MessageQ answers a message that could not be
delivered (SUCCESS, delivery status MSGUNDEL, UMA status DLJ_SUCCESS when it went to
the DLJ, DISC_SUCCESS when it was discarded), not at its timeout.
"""

from __future__ import annotations

import trio

from clients import DeliveryMode, Status

MODE = DeliveryMode
PUT_TIMEOUT_S = 120.0
"""Far longer than the test may take: an answer means the purge gave it."""
WAIT_S = 30.0


async def _waiting(client, queue: str, count: int) -> None:
    """Until `count` messages wait on `queue` (the puts reached it)."""
    with trio.fail_after(WAIT_S):
        while (await client.admin("browse", queue=queue, limit=10))["waiting"] < count:
            await trio.sleep(0.02)


async def test_waiting_wf_puts_are_answered_msgundel_by_a_purge(make_bus) -> None:
    group = make_bus()
    answers: dict[str, object] = {}
    with trio.fail_after(WAIT_S):  # the puts too: well before their own 120 s
        await _put_both_and_purge(group, answers)
    conf, deq = answers["conf"], answers["deq"]
    assert (conf.status, conf.delivery_status, conf.uma_status) == (
        Status.SUCCESS, Status.MSGUNDEL, Status.DLJ_SUCCESS,
    )  # fmt: skip
    assert (deq.status, deq.delivery_status, deq.uma_status) == (
        Status.SUCCESS, Status.MSGUNDEL, Status.DISC_SUCCESS,
    )  # fmt: skip


async def _put_both_and_purge(group, answers: dict) -> None:
    """A WF_CONF (DQF) and a WF_DEQ (memory) put waiting on 1.10, then its purge."""
    async with (
        group.connect("SENDER") as recoverable,
        group.connect("SENDER2") as memory,
        group.connect(None) as operator,
        trio.open_nursery() as nursery,
    ):

        async def put(name: str, client, mode: MODE) -> None:
            answers[name] = await client.put(
                name.encode(), target="1.10", delivery=mode, timeout=PUT_TIMEOUT_S
            )

        nursery.start_soon(put, "conf", recoverable, MODE.WF_CONF)
        nursery.start_soon(put, "deq", memory, MODE.WF_DEQ)
        await _waiting(operator, "1.10", 2)
        purged = await operator.admin("purge", queue="1.10", reason="test")
    assert purged["dead_lettered"] == 1 and purged["memory_discarded"] == 1
    assert purged["senders_told"] == 2


async def test_an_ak_conf_sender_gets_its_mrs_ack_from_a_discarding_purge(make_bus) -> None:
    group = make_bus()
    async with group.connect("SENDER") as sender, group.connect(None) as operator:
        psb = await sender.put(b"conf me", target="1.11", delivery=MODE.AK_CONF)
        await _waiting(operator, "1.11", 1)
        purged = await operator.admin("purge", queue="1.11", discard=True)
        assert purged["discarded"] == 1 and purged["senders_told"] == 1
        ack = await sender.get(timeout=WAIT_S)
    assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
    assert ack.ack_psb().delivery_status == Status.MSGUNDEL
    assert ack.ack_psb().uma_status == Status.DISC_SUCCESS


async def test_a_purge_with_no_waiting_sender_tells_nobody(make_bus) -> None:
    group = make_bus()
    async with group.connect("SENDER") as sender, group.connect(None) as operator:
        psb = await sender.put(b"stored", target="1.10", delivery=MODE.WF_DQF)
        assert psb.delivery_status == Status.STORED
        purged = await operator.admin("purge", queue="1.10")
    assert purged["dead_lettered"] == 1 and purged["senders_told"] == 0


async def test_mrs_admin_purge_says_how_many_senders_it_told(make_bus) -> None:
    from tests.cli_helpers import run_mrs

    group = make_bus()
    answers: dict[str, object] = {}
    with trio.fail_after(WAIT_S):
        async with (
            group.connect("SENDER") as sender,
            group.connect(None) as operator,
            trio.open_nursery() as nursery,
        ):

            async def put() -> None:
                answers["conf"] = await sender.put(
                    b"wait", target="1.10", delivery=MODE.WF_CONF, timeout=PUT_TIMEOUT_S
                )

            nursery.start_soon(put)
            await _waiting(operator, "1.10", 1)
            done = await trio.to_thread.run_sync(
                run_mrs, "admin", "purge", "1.10", "--address", group.address
            )
    assert done.returncode == 0, done.stderr
    assert " ".join(done.stdout.split()) == (  # the line wraps at 80 columns
        "purged 1.10: 1 to the DLJ, 0 discarded, 0 memory messages discarded; 0 left; "
        "1 waiting senders told MSGUNDEL"
    )
    assert answers["conf"].delivery_status == Status.MSGUNDEL
