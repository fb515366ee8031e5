"""Probes of the dead-letter handler's rules table against the runmqdlq grammar, as an
IBM MQ administrator moving a table to `mrs dlq-handler` meets it: REPLYQ against the
reply queue `&REPLYQ` forwards to, queue names longer than MQ's 48 characters and
patterns longer than their field, and the reference's own catch-all rules with their
dotted MQ queue names. Each was a defect once; each test says what a user sees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clients import DeliveryMode, Status, Uma
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES
from tests.process.test_dlq_handler import dlq_bodies, letter_header, put_letter, run_handler
from tests.process.test_dlq_probes import ENV, ROOT

LONG_NAME = "ORDERS_FOR_THE_EUROPEAN_WAREHOUSE_IN_ROTTERDAM_NORTH_SIDE"
"""57 characters: a valid MRS queue name (up to 127), longer than MQ's 48."""


async def test_replyq_matches_the_reply_queue_that_replyq_forwards_to(bus) -> None:
    """A letter whose `reply_q` header names its reply queue by name ("NYC.SENDER2",
    or "SENDER2" in the sender's group) was matched by REPLYQ against its sender
    instead, while `&REPLYQ` forwarded it to the header's queue: a rule for replies to
    SENDER2 took none of them, and a rule for SENDER took them all."""
    async with bus.connect(queue="SENDER") as sender:
        for body, reply_q in ((b"named", "NYC.SENDER2"), (b"bare", "SENDER2"), (b"num", "1.16")):
            await put_letter(sender, body, letter_header(), headers={"reply_q": reply_q})
        await put_letter(sender, b"no reply queue", letter_header())
    table = (
        "REPLYQ(SENDER2) REPLYQM(NYC) ACTION(FWD) FWDQ(&REPLYQ) FWDQM(&REPLYQM)\n"
        "REPLYQ(SENDER) ACTION(DISCARD)\n"
    )
    _, events = await run_handler(bus, table)
    outcomes = sorted((event["rule_line"], event["outcome"], event["target"]) for event in events)
    assert outcomes == [(1, "forwarded", "1.16")] * 3 + [(2, "discarded", "")]
    async with bus.connect(queue="SENDER2") as replies:
        assert sorted(m.body for m in await take_all(replies)) == [b"bare", b"named", b"num"]
    assert await dlq_bodies(bus) == []


async def test_a_queue_named_longer_than_48_characters_is_matched_by_its_name(
    make_bus,
) -> None:
    """Each value was cut to its MQ field before matching, the configured queue name
    too: `DESTQ(<a 57-character name>)` matched no letter for that queue, silently.
    The letter here is a real one: the server refused it EXCEEDQUOTA (UMA DLQ)."""
    queues = STANDARD_QUEUES + f'[[group.queue]]\nid = 20\nname = "{LONG_NAME}"\nmessages_max = 1\n'
    bus = make_bus(queues=queues)
    async with bus.connect(queue="SENDER") as sender:
        for body in (b"fits", b"refused"):
            psb = await sender.put(
                body, target=LONG_NAME, delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ
            )
        assert (psb.delivery_status, psb.uma_status) == (Status.EXCEEDQUOTA, Status.DLQ_SUCCESS)
    _, events = await run_handler(bus, f"DESTQ({LONG_NAME}) ACTION(FWD) FWDQ(ANYORDER)\n")
    assert [(event["rule_line"], event["outcome"]) for event in events] == [(1, "forwarded")]
    async with bus.connect(queue="ANYORDER") as forwarded_to:
        [forwarded] = await take_all(forwarded_to)
    assert forwarded.body == b"refused"
    assert forwarded.dead_letter_header["dest_q_name"] == "20"


def _check(config: Path, rules: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--check", "--config", str(config)]
    return subprocess.run(
        [*command, "--group", "1", str(rules)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
    )


def test_the_references_catch_all_rules_and_too_long_patterns_are_told_in_one_line(
    bus, tmp_path
) -> None:
    """The reference's own rules, verbatim (`ACTION (FWD) FWDQ (REALLY.DEAD.QUEUE)
    HEADER (YES)`), were refused with "not a queue address" or "no group named
    'DEAD'", which does not tell an MQ administrator that '.' is MRS's GROUP.QUEUE
    separator; and `USERID(administrator)` (13 characters, the field holds 12) was
    called valid yet could never match."""
    rules = tmp_path / "migrated.rules"
    rules.write_text(
        "* from the reference, verbatim\n"
        "ACTION (FWD) FWDQ (IGNORED.DEAD.QUEUE) HEADER (YES)\n"
        "USERID(administrator) ACTION(DISCARD)\n"
        "ACTION (FWD) FWDQ (DEAD.QUEUE) HEADER (YES)\n"
    )
    result = _check(bus.config_path, rules)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    warning, ignored, dead, total = lines
    assert warning.startswith(f"mrs dlq-handler: {rules}: line 3, column 1: warning: ")
    assert "USERID(administrator) matches nothing" in warning and "at most 12" in warning
    assert ignored.startswith(f"mrs dlq-handler: {rules}: line 2, column 14: ")
    assert dead.startswith(f"mrs dlq-handler: {rules}: line 4, column 14: ")
    for line in (ignored, dead):
        assert "'.' separates GROUP.QUEUE in MRS" in line
    assert total == "mrs dlq-handler: 2 error(s) in the rules table; not started"
    rules.write_text(
        "ACTION (FWD) FWDQ (ANYORDER) HEADER (YES)\nUSERID(administrato*) +\n  ACTION(DISCARD)\n"
    )
    fixed = _check(bus.config_path, rules)
    assert (fixed.returncode, fixed.stderr) == (0, "")
    assert fixed.stdout == f"{rules}: rules table valid: 2 rules\n"
