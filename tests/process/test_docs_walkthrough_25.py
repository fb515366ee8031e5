"""A newcomer's walk through the docs, pages one after another on one group.

test_docs_pasted.py pastes each page into a scratch checkout of its own; a reader
pastes them into one, against one running group 1 of the example bus, so what one
page leaves on a queue is there when the next page's example runs. These tests hold
the examples to what their pages say they print in that case too, and the journal
tools' one-line answers to a reader's mistake to what would fix it.
"""

from __future__ import annotations

from pathlib import Path

from journals import Journal
from tests.cli_helpers import run_mrs
from tests.journal_helpers import record, write_records
from tests.process.test_docs_pasted import PastedPage, blocks, console_commands, pasted

__all__ = ["pasted"]  # the fixture, used by the tests below

LEFT_OVER = (
    'from clients import connect_sync\nwith connect_sync("127.0.0.1:7001", "SENDER") as q:\n'
)


def _lines(output: str) -> list[str]:
    return output.strip().splitlines()


def test_timeouts_examples_print_what_the_page_says_after_its_idempotency_block(
    pasted,
) -> None:
    """timeouts-and-duplicates.md's idempotency block leaves "pay invoice 7" on ORDERS
    (the page never takes it), and another page's reply may wait on SENDER; the two
    examples the page links, run next as their docstrings say, took those first:
    ak_and_timeouts printed ": duplicate=False" for the invoice and never its second
    order-18, leaving it on ORDERS; messageq_conformance then confirmed that memory
    message (BADSEQ) and its WF_CONF put waited 30 s for a confirm that never came."""
    page: PastedPage = pasted("timeouts-and-duplicates.md")
    page.serve_examples()
    [resend] = page.run_all()
    assert resend.split()[0] == "STORED"
    page.run("python", LEFT_OVER + '    q.put(b"reply from another page", target="SENDER")\n')
    ak = page.run("sh", "python docs/examples/ak_and_timeouts.py 127.0.0.1:7001")
    assert _lines(ak)[1:] == [
        "timed out (TIMEOUT); resending order-18",
        "order-17: duplicate=False",
        "order-18: duplicate=False",
        "order-18: duplicate=True",
    ]
    assert _lines(ak)[0].startswith("MRS_ACK for seq ") and _lines(ak)[0].endswith(": STORED")
    conformance = page.run("sh", "python docs/examples/messageq_conformance.py 127.0.0.1:7001")
    assert _lines(conformance)[0].startswith("WF_CONF with timeout=0: SUCCESS seq ")
    assert _lines(conformance)[1:] == [
        "put to DISPATCH: NOTACTIVE, RTS_SUCCESS",
        "returned: original_target=1.12 reason=NOTACTIVE",
    ]
    config = "docs/examples/bus.toml"
    left = page.run("sh", f"mrs dump --config {config} --group 1 dqf --json --body")
    assert "pay invoice 7" in left  # the page's message is still there, untouched
    waiting = page.run("sh", f"mrs admin browse SENDER --config {config} --json")
    assert "reply from another page" in waiting


def test_priority_selection_prints_the_whole_transcript_of_delivery_modes(pasted) -> None:
    """delivery-modes.md's transcript of examples/priority_selection.py showed three of
    the six lines it prints (the NOMOREMSG, the refused selection and the blocking
    client's get were missing): what the page shows is all it prints."""
    page: PastedPage = pasted("delivery-modes.md")
    [transcript] = blocks(page.page, "Selective", "console")
    commands = console_commands(transcript).splitlines()
    assert commands[0].startswith("mrs serve --config docs/examples/bus.toml --group 1")
    page.serve(commands[0])
    shown = [line for line in transcript.splitlines() if not line.startswith("$ ")]
    assert _lines(page.run("sh", "\n".join(commands[1:]))) == shown


def test_a_queue_name_with_data_dir_alone_asks_for_config(tmp_path: Path) -> None:
    """`mrs dump --data-dir DIR pcj --target ORDERS` said "'ORDERS' names a queue by
    number only: give --group N": a reader who then gave --group was told names need
    --config. A name asks for --config at once; a bare number still asks for --group."""
    (tmp_path / "journals").mkdir()
    write_records(tmp_path / "journals", Journal.PCJ, [record(1)])  # a copy of a group's
    named = run_mrs("dump", "--data-dir", str(tmp_path), "pcj", "--target", "ORDERS")
    assert named.returncode == 2
    assert named.stderr.strip() == (
        "mrs dump: --target: 'ORDERS': queue and group names need --config "
        "(or give GROUP.QUEUE numbers)"
    )
    numbered = run_mrs("dump", "--data-dir", str(tmp_path), "pcj", "--source", "10")
    assert numbered.returncode == 2
    assert "'10' names a queue by number only: give --group N" in numbered.stderr
