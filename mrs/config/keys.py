"""The one wording of an unknown key in the bus file, with the key it was likely meant to be.

Why a module of its own: every table of the file (`mrs.config.fields` for most,
`mrs.config.guards`, which returns its problems instead of raising) refuses an
unknown key, and an operator who typed `heartbeat_interval` for
`heartbeat_interval_s` needs the suggestion whichever table the typo is in. It
imports nothing of `mrs.config`, so every table's module can use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection


def unknown_key_problem(key: str, allowed: Collection[str]) -> str:
    """The problem text for `key` not in `allowed`: the closest allowed key, if one
    is close, then every allowed key."""
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{hint}; allowed keys: {', '.join(sorted(allowed))}"
