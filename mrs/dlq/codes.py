"""Symbolic values the pattern keywords accept: MQRC_*, MQFB_*, MQMT_*, MQPER_*, statuses.

An operator's runmqdlq table says `REASON(MQRC_Q_FULL)`; this turns such names into
the numbers the dead-letter header and the message carry. Numbers are accepted as is.
"""

from __future__ import annotations

from mrs.core import deadletter
from mrs.model import Status

MQRC = {name: value for name, value in vars(deadletter).items() if name.startswith("MQRC_")}
MQRC.update(
    MQRC_NOT_AUTHORIZED=2035,
    MQRC_PERSISTENT_NOT_ALLOWED=2048,
)
MQFB = {
    "MQFB_NONE": 0,
    "MQFB_QUIT": 256,
    "MQFB_EXPIRATION": 258,
    "MQFB_COA": 259,
    "MQFB_COD": 260,
    "MQFB_CHANNEL_FAIL": 264,
    "MQFB_APPL_CANNOT_BE_STARTED": 265,
    "MQFB_XMIT_Q_MSG_ERROR": 271,
}
MQMT = {"MQMT_REQUEST": 1, "MQMT_REPLY": 2, "MQMT_REPORT": 4, "MQMT_DATAGRAM": 8}
MQPER = {"MQPER_NOT_PERSISTENT": 0, "MQPER_PERSISTENT": 1, "MQPER_PERSISTENCE_AS_Q_DEF": 2}
STATUSES = {member.name: member.value for member in Status}
STATUSES.update({f"PAMS__{member.name}": member.value for member in Status})

NAMES: dict[str, dict[str, int]] = {
    "REASON": {**MQRC, **MQFB, **STATUSES},
    "FEEDBACK": {**MQFB, **STATUSES},
    "MSGTYPE": MQMT,
    "PERSIST": MQPER,
}
NUMERIC_KEYWORDS = frozenset(NAMES)


def number_for(keyword: str, value: str) -> int | None:
    """The number a numeric keyword's value stands for, or None if it is neither a
    number nor a name the keyword knows."""
    text = value.strip()
    names = NAMES.get(keyword, {})
    if text.upper() in names:
        return names[text.upper()]
    digits = text[1:] if text[:1] in "+-" else text
    if digits.isascii() and digits.isdigit() and len(digits) <= 18:
        return int(text)
    return None
