"""An admin refusal in the words of the front end that shows it: one rule, two
renderings.

Why: a refusal is made once, by the rule that refuses (the group's
mrs.ops.admin_actions, its `grant_problem` included), in the terms of the
AdminRequest itself: its argument
names in backquotes (`discard=true`, `to`), the words of a program that calls
`client.admin()`. `mrs admin` shows them as its options (`--discard`), the web pages
as their fields and buttons. Before, the rule was written for the command line: the
web page read "purge with --discard" and "add-queue 20 NAME" where it has boxes and
buttons.
"""

from __future__ import annotations

import re
from typing import Literal

from mrs.security.permissions import GRANT_KINDS

Front = Literal["cli", "web"]

GIVE_A_RIGHT = "`" + "`/`".join(GRANT_KINDS) + "`"
"""The grant's rights, as a refusal names them (mrs.ops.admin_actions.grant_problem)."""

_TERMS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"`discard=true`"),
        "--discard",
        "`mrs admin purge --discard` (not on this page)",
    ),
    (
        re.compile(r"`add_queue id=([0-9]+)`"),
        r"`mrs admin add-queue \1 NAME`",
        r"Add queue with id \1 and a name",
    ),
    (re.compile(r"`none=true`"), "--none", "'none (take every grant away)' ticked"),
    (
        re.compile(re.escape(GIVE_A_RIGHT)),
        "/".join(f"--{kind}" for kind in GRANT_KINDS),
        "a pattern in attach, put, confirm or manage, or a right in admin",
    ),
    (re.compile(r"`to`"), "--to", "to"),
)
"""Each term of an AdminRequest a refusal names: (the term, the command line's word,
the web page's word)."""


def rendered(message: str, front: Front) -> str:
    """`message` (a refusal in the AdminRequest's terms) in the words of `front`."""
    for term, cli, web in _TERMS:
        message = term.sub(cli if front == "cli" else web, message)
    return message
