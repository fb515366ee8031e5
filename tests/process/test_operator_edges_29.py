"""What an operator and an application developer meet at the edges: an instance whose
etcd is down, `mrs admin` given values out of range, and a `put_many` item left
unanswered. Real `mrs` processes, and a real TCP peer for the client library. Each
says, in one line, what is wrong, where, and what to do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Psb, ReplyTimeout, Status, connect
from clients.batch import PutItem
from mrs import protocol as wire
from mrs.config.bus import load_config
from mrs.limits import ADMIN_LOG_RECORDS_MAX
from sim.etcd import InstanceProcess, write_replicated_config
from sim.ports import free_port
from tests.cli_helpers import run_mrs
from tests.client_helpers import scripted_server
from tests.conftest import STANDARD_QUEUES
from tests.process.test_auth_lifecycle import wait_for_log

WAIT_S = 20.0
"""Every wait's bound here: a call that has not ended by then hangs."""


def test_an_instance_with_etcd_down_names_its_endpoints_and_the_config_key(
    tmp_path: Path,
) -> None:
    """Why: `mrs serve --instance` logged the etcd client's words, `coordinator
    unavailable: etcd unreachable: http://...: cannot connect`, with no word of where
    etcd is configured; `mrs failover` names the endpoints and `[coordinator] etcd` of
    the file, and now the server's log line says it the same way."""
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = write_replicated_config(tmp_path, endpoint, STANDARD_QUEUES)
    instance = InstanceProcess(config, "a")
    instance.start()
    try:
        instance.wait_for("REPLICA a")
        expected = (
            f"coordinator unavailable: etcd at {endpoint} does not answer (cannot connect); "
            "check that etcd is running there and that [coordinator] etcd in "
            f"{load_config(config).path} is its client URL"
        )
        trio.run(wait_for_log, tmp_path / "a.log", expected)
    finally:
        instance.terminate()
    assert instance.process is not None and instance.process.returncode == 0
    assert "etcd unreachable" not in (tmp_path / "a.log").read_text()


NOT_UTF8 = "\udcff"
"""The byte 0xff as Python holds an argument the terminal's encoding does not decode."""


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("browse", "ORDERS", "--limit", "0"), "argument --limit: must be a whole number 1..1000"),
        (("browse", "ORDERS", "--limit", "-3"), "must be a whole number 1..1000, got -3"),
        (("browse", "ORDERS", "--after", "-5"), "a message's seq), got -5"),
        (("browse", "ORDERS", "--correlation-id", "abc"), "hex digits, two per byte"),
        (("browse", "ORDERS", "--correlation-id", "ab" * 33), "at most 32 bytes"),
        (("move", "ORDERS", "--to", "REPLAY", "--correlation-id", "zz"), "hex digits"),
        (("reset-link", "-1"), "argument peer: must be a group id 1..32000"),
        (("reset-link", "0"), "argument peer: must be a group id 1..32000"),
        (("connections", "--group", "0"), "argument --group: must be a group id 1..32000"),
        (("journal", "--limit", "0"), "argument --limit: must be a whole number >= 1"),
        (
            ("journal", "--limit", str(ADMIN_LOG_RECORDS_MAX + 1)),
            f"--limit must be 1..{ADMIN_LOG_RECORDS_MAX}",
        ),
        (("browse", "ORDERS", "--contains", NOT_UTF8), "--contains b'\\xff' is not UTF-8 text"),
        (("purge", f"OR{NOT_UTF8}DERS"), "queue b'OR\\xffDERS' is not UTF-8 text"),
    ],
)
def test_an_admin_value_out_of_range_is_a_usage_error_before_the_group_is_asked(
    args: tuple[str, ...], words: str
) -> None:
    """Why: `--limit 0`, `--after -5` and an odd correlation id went to the group, and
    the operator read its refusal with exit 1 (or, the group down, "cannot connect");
    `reset-link -1` was answered "give peer, the other group's id", a peer given; a
    33-byte correlation id matched nothing and showed an empty page; a byte that is
    not UTF-8 ended as "cannot encode AdminRequest: UnicodeEncodeError ...". Now each
    is one line naming the range, exit 2, with nothing asked (nothing listens at the
    address)."""
    address = f"127.0.0.1:{free_port()}"
    result = run_mrs("admin", *args, "--address", address)
    text = _refused(result, 2)
    assert words in text, text
    assert "cannot connect" not in text


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("nonsense", "--address: must be 'host:port', got 'nonsense'"),
        ("127.0.0.1:99999", "--address: port must be a number in 1..65535, got '99999'"),
        ("127.0.0.1:7001,nonsense", "--address: must be 'host:port', got 'nonsense'"),
    ],
)
def test_a_mistyped_admin_address_is_a_usage_error_as_in_mrs_status(
    address: str, words: str
) -> None:
    """Why: `mrs admin connections --address nonsense` was the client's refusal at
    connect, exit 1, where `mrs status --address nonsense` says the same mistake is
    one of usage, exit 2; each HOST:PORT of a replicated group's list is read."""
    assert words in _refused(run_mrs("admin", "connections", "--address", address), 2)


def _refused(result: subprocess.CompletedProcess, code: int) -> str:
    """The one line on stderr of a command that exited `code`, no traceback."""
    text = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    assert text and text.count("\n") == 0, text
    return text


def _answer_all_but_lost(event: object) -> list:
    """A group that answers every put but those whose body starts with b"lost"."""
    puts = event.puts if isinstance(event, wire.PutBatch) else [event]
    return [
        wire.PutDone(put.request_id, int(Status.SUCCESS), int(Status.STORED), 7, 0)
        for put in puts
        if isinstance(put, wire.Put) and not put.body.startswith(b"lost")
    ]


async def test_a_put_many_item_left_unanswered_is_named_with_what_a_resend_does() -> None:
    """Why: each item left unanswered read "no answer from the server in time", the
    same for every item: no word of which put it was, that the others were answered,
    or that its message may be stored and whether a re-send is safe. Now its line
    names its index and target and, with its idempotency key, how to re-send it."""
    items = [
        PutItem(b"answered", "ORDERS", timeout=0.1),
        PutItem(b"lost 1", "ORDERS", timeout=0.1, headers={"idempotency_key": "order-1"}),
        PutItem(b"lost 2", "1.10", delivery=DeliveryMode.WF_DQF, timeout=0.1),
    ]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, _answer_all_but_lost)
        with trio.fail_after(WAIT_S):
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
                answered, keyed, bare = await q.put_many(items)
        nursery.cancel_scope.cancel()
    assert isinstance(answered, Psb) and answered.delivery_status is Status.STORED
    assert isinstance(keyed, ReplyTimeout) and isinstance(bare, ReplyTimeout)
    head = f"no answer from 127.0.0.1:{port} within 5.1 s (2 of the 3 items unanswered"
    assert str(keyed) == (
        f"mrs: TIMEOUT: put_many items[1] (to ORDERS): {head}; the others have results); "
        "the message may or may not be stored: re-send it under its idempotency key "
        "'order-1': the group stores it once"
    )
    assert str(bare).startswith(f"mrs: TIMEOUT: put_many items[2] (to 1.10): {head}")
    assert str(bare).endswith("it carries no idempotency key, so a re-send may store it twice")
