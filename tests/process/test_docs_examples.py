"""The runnable examples in docs/ run, against a real server on the docs' own config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.processes import GroupProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture
def docs_server(tmp_path):
    config = (EXAMPLES / "bus.toml").read_text().replace("127.0.0.1:7001", "127.0.0.1:0")
    (tmp_path / "bus.toml").write_text(config)
    server = GroupProcess(tmp_path / "bus.toml", 1)
    server.start()
    yield server
    server.terminate()


@pytest.mark.parametrize(
    "example, expected",
    [
        ("quickstart.py", ["stored as seq", "CONFIRMREQ", "confirmed and journaled"]),
        (
            "errors.py",
            [
                "NoSuchQueue: status NOSUCHQUEUE",
                "MessageTooBig: status MSGTOOBIG",
                "BadSequence: status BADSEQ",
                "NoMoreMessages: status NOMOREMSG",
                "QueueBusy: status QUEUE_BUSY",
                "BadParameter: status BADPARAM",
                "MrsError: mrs: NOSUCHQUEUE: ",
            ],
        ),
        (
            "priority_selection.py",
            [
                "priority order: urgent 1, urgent 2, routine 1, routine 2",
                "by correlation id: reply 3",
                "class 7, type >= 2: reply 2, reply 4",
                "none left: NOMOREMSG",
                "refused: BADPARAM",
                "blocking: class 3 type 1",
            ],
        ),
        (
            "ak_and_timeouts.py",
            ["MRS_ACK for seq", "STORED", "timed out (TIMEOUT)", "order-18: duplicate=True"],
        ),
        (
            "guards.py",
            [
                "101 parked gets: 1 refused with EXCEEDQUOTA",
                "put 4 of 1 MiB: UNATTACHEDQ, NO_UMA",
                "put 5 of 1 MiB: EXCEEDQUOTA, DISC_SUCCESS",
            ],
        ),
        (
            "dlq_queue_full.py",
            [
                "put order 4: EXCEEDQUOTA, DLQ_SUCCESS",
                "action=RETRY attempt=1 outcome=failed",
                "SMALLQ received: order 0, order 1, order 2, order 3, order 4",
                "retried=3",
                "handler exit code 0",
            ],
        ),
        (
            "protection.py",
            [
                "BILLING read: b'card 4111 for order 17' signed by SHOP",
                "MALLORY refused: PROTECTION_ERROR 2063",
                "DLQ: reason 2063 from 1.10",
                "DLQ body is still sealed: b'MRSPDMQ1' True",
            ],
        ),
        (
            "put_many.py",
            [
                "2501 of 2503 stored, seqs in order: True",
                "b'second' -> KeyReused: KEY_REUSED",
                "b'nowhere' -> NoSuchQueue: NOSUCHQUEUE",
                "get_many: 100 messages, b'line 1' .. b'line 100'",
                "confirmed 100; next: b'line 101'",
            ],
        ),
        (
            "messageq_conformance.py",
            [
                "WF_CONF with timeout=0: SUCCESS",
                "put to DISPATCH: NOTACTIVE, RTS_SUCCESS",
                "returned: original_target=1.12 reason=NOTACTIVE",
            ],
        ),
    ],
)
def test_example_runs(docs_server, example, expected) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / example), docs_server.address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for line in expected:
        assert line in result.stdout


def test_messageq_api_example_runs(docs_server, tmp_path) -> None:
    """docs/client-library.md's table of MessageQ calls: locate, pending, open_journal
    (from the files and through the group), set_pcj."""
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "messageq_api.py"),
            docs_server.address,
            str(tmp_path / "g1"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for line in [
        "ORDERS is 1.10",
        "locate NO_SUCH_QUEUE: NOSUCHQUEUE",
        "pending on ORDERS, SENDER: [3, 0]",
        "pending after the gets: [0]",
        "target=1.10 body=b'order 0' confirm_value=100 status=SUCCESS",
        "confirm_value=102 status=SUCCESS",
        "set_pcj: default=True segment=1 closed=0",
        "segment=0 body=b'order 2'",
        "segment=1 body=b'after the roll'",
        "blocking: the PCJ's default is True",
        "blocking: segment 1 holds [b'after the roll']",
        "blocking: SENDER is 1.11, pending [0]",
    ]:
        assert line in result.stdout, result.stdout
