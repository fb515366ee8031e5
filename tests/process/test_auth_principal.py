"""Who put a message, with [auth] on: real `mrs serve` processes, real credentials.

The principal of the client that put a message is kept in the records its group
writes (the DQF record, and the PCJ record made from it at the confirm), shown by
`mrs dump` (table and --json) and named in the audit's trail (issue 50)."""

from __future__ import annotations

import json

import pytest

from clients import DeliveryMode, ForceJrn, Uma, connect
from tests.auth_helpers import SecureBus, creds
from tests.cli_helpers import run_mrs


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    bus = SecureBus(tmp_path_factory.mktemp("principal"))
    bus.start()
    yield bus
    bus.stop()


def dumped(bus: SecureBus, journal: str) -> list[dict]:
    shown = run_mrs("dump", "--config", str(bus.config_path), "--group", "1", journal, "--json")
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


async def test_the_records_dump_and_trail_say_which_principal_put_a_message(secure) -> None:
    async with connect(secure.address(1), "1.13", credentials=creds("producer")) as producer:
        for correlation_id in (b"who-1", b"who-2"):
            await producer.put(b"m", "1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF,
                               correlation_id=correlation_id, timeout=10)  # fmt: skip
    async with connect(secure.address(1), "1.10", credentials=creds("consumer")) as consumer:
        message = await consumer.get(timeout=10)
        assert message.correlation_id == b"who-1"
        await consumer.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)

    pcj = [(r["correlation_id"], r["source"], r["principal"]) for r in dumped(secure, "pcj")]
    dqf = [(r["correlation_id"], r["source"], r["principal"]) for r in dumped(secure, "dqf")]
    assert pcj == [("who-1", "1.13", "producer")]
    assert dqf == [("who-2", "1.13", "producer")]
    table = run_mrs("dump", "--config", str(secure.config_path), "--group", "1", "pcj")
    assert table.returncode == 0 and "1.13 (producer)" in table.stdout

    trail = run_mrs("audit", "--config", str(secure.config_path), "--group", "1",
                    "--trail", "who-1", "--json")  # fmt: skip
    assert trail.returncode == 0, trail.stderr
    events = json.loads(trail.stdout)["events"]
    assert [event["event"] for event in events] == ["put", "delivered", "confirm"]
    assert {event["principal"] for event in events} == {"producer"}
    assert "put by 1.SENDER (principal producer) to 1.IN" in events[0]["detail"]
