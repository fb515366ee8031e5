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
NUMBER_ONLY_KEYWORDS = frozenset({"REASON", "FEEDBACK", "MSGTYPE", "PERSIST"})
"""Keywords whose value in a dead letter is always a number (the header's reason is
an int, its status (FEEDBACK) too, a message's type too, PERSIST is 0 or 1): a wildcard
pattern there is matched against the digits, so one with a letter in it
(`REASON(MQRC_Q_*)`, `FEEDBACK(DQF_*)`) matches nothing."""


def reason_instead(value: str) -> str | None:
    """Why REASON(<a MessageQ status>) would never match, or None. A dead letter MRS
    refused with a status that has an MQRC_* code (EXCEEDQUOTA, DQF_FULL, LINK_DOWN, ...)
    carries that code as its reason, never the status: such a rule is checked as valid
    yet takes nothing, so the table is refused with what to write instead."""
    name = value.strip().upper().removeprefix("PAMS__")
    status = Status.__members__.get(name)
    if status is None or status not in deadletter.REASON_FOR_STATUS:
        return None
    code = deadletter.REASON_FOR_STATUS[status]
    mqrc = next(mqrc for mqrc, number in MQRC.items() if number == code)
    return (
        f"a dead letter refused {name} carries reason {mqrc} ({code}), never {name}: "
        f"write REASON({mqrc}), or FEEDBACK({name}) for this status alone"
    )


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
