"""A newcomer's walk through the docs, pages one after another on one group (31).

A reader runs timeouts-and-duplicates.md's idempotency block (it leaves "pay invoice
7" on ORDERS: the page never takes it) and then security-protection.md's two
examples against the same group 1 of the example bus. Both took the oldest message
on ORDERS with a plain get: it was not sealed for their policy, so the client
refused it, moved it to the DLJ and the example stopped with a traceback.
"""

from __future__ import annotations

from tests.process.test_docs_pasted import PastedPage, pasted

__all__ = ["pasted"]  # the fixture, used by the test below


def test_protection_examples_print_what_the_page_says_after_another_pages_message(
    pasted,
) -> None:
    """key_rotation.py and protection.py read their own messages, whatever waits on
    ORDERS before them, and leave the other page's message where it was."""
    page: PastedPage = pasted("timeouts-and-duplicates.md")
    page.serve_examples()
    [resend] = page.run_all()
    assert resend.split()[0] == "STORED"
    rotation = page.run("sh", "python docs/examples/key_rotation.py 127.0.0.1:7001")
    assert rotation.splitlines() == ["BILLING read: b'order 17'", "BILLING read: b'order 18'"]
    protection = page.run("sh", "python docs/examples/protection.py 127.0.0.1:7001")
    lines = protection.splitlines()
    assert lines[0].startswith("SHOP put seq ") and lines[0].endswith(" STORED")
    assert lines[1:] == [
        "BILLING read: b'card 4111 for order 17' signed by SHOP",
        "MALLORY refused: PROTECTION_ERROR 2063",
        "DLQ: reason 2063 from 1.10",
        "DLQ body is still sealed: b'MRSPDMQ1' True",
    ]
    config = "docs/examples/bus.toml"
    left = page.run("sh", f"mrs dump --config {config} --group 1 dqf --json --body")
    assert "pay invoice 7" in left  # the other page's message, untouched
    dead = page.run("sh", f"mrs dump --config {config} --group 1 dlj --json")
    assert dead.strip() == ""  # nothing of the reader's was refused to the DLJ
