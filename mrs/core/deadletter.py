"""The dead-letter header: what a message on a DLQ carries about why it is there.

Modelled on IBM MQ's MQDLH (`shared/reference/runmqdlq-rules-grammar.md`) so that a
runmqdlq-style handler can match on it: reason (an MQRC_* code where one fits),
original destination queue and group, format of the data, the putting application's
name and type, put date and time. MessageQ's own status is kept beside it.
"""

from __future__ import annotations

import time

from mrs.limits import DEAD_LETTER_FIELD_CHARS_MAX
from mrs.model import Address, Status

STRUC_ID = "DLH "
VERSION = 1
FORMAT_MRS = "MRS"
"""Format of the data after the header: an MRS message body, untouched."""
PUT_APPL_TYPE_MRS = "MRS"
MQENC_NATIVE = 546
"""Encoding of the data after the header: MQ's native (little-endian) encoding."""
CCSID_UTF8 = 1208
"""CodedCharSetId of the data after the header (and of the header's text fields)."""

MQRC_MSG_TOO_BIG_FOR_Q = 2030
MQRC_MSG_TOO_BIG_FOR_Q_MGR = 2031
MQRC_PUT_INHIBITED = 2051
MQRC_Q_FULL = 2053
MQRC_Q_MGR_NOT_AVAILABLE = 2059
MQRC_STORAGE_NOT_AVAILABLE = 2071
MQRC_UNKNOWN_OBJECT_NAME = 2085
MQRC_UNKNOWN_REMOTE_Q_MGR = 2087
MQRC_RESOURCE_PROBLEM = 2102

REASON_FOR_STATUS: dict[Status, int] = {
    Status.DQF_FULL: MQRC_Q_FULL,
    Status.EXCEEDQUOTA: MQRC_Q_FULL,
    Status.NO_DQF: MQRC_UNKNOWN_OBJECT_NAME,
    Status.NOSUCHQUEUE: MQRC_UNKNOWN_OBJECT_NAME,
    Status.MSGTOOBIG: MQRC_MSG_TOO_BIG_FOR_Q,
    Status.LINK_DOWN: MQRC_Q_MGR_NOT_AVAILABLE,
    Status.NOTACTIVE: MQRC_PUT_INHIBITED,
    Status.MRS_RES_EXH: MQRC_STORAGE_NOT_AVAILABLE,
    Status.DQF_DEVICE_FAIL: MQRC_RESOURCE_PROBLEM,
    Status.SAF_DEVICE_FAIL: MQRC_RESOURCE_PROBLEM,
}


def reason_code(cause: Status | int) -> int:
    """The MQRC_* code for a cause, or the MessageQ status itself when none fits."""
    return REASON_FOR_STATUS.get(cause, int(cause))


def dead_letter_header(
    cause: Status | int, destination: Address, put_appl_name: str, put_time_ns: int, text: str = ""
) -> dict:
    """A header for a message the system moves to a DLQ. `put_appl_name` is the
    group's name (MQ: the queue manager's) when MRS itself redirects the message,
    cut to MQDLH's 28 characters so a handler can forward the header as it is."""
    put_seconds = put_time_ns / 1e9 if put_time_ns else time.time()
    stamp = time.gmtime(put_seconds)
    hundredths = int(put_seconds * 100) % 100
    return {
        "struc_id": STRUC_ID,
        "version": VERSION,
        "reason": reason_code(cause),
        "mrs_status": int(cause),
        "mrs_status_name": cause.name if isinstance(cause, Status) else str(cause),
        "dest_q_name": str(destination.queue),
        "dest_q_mgr_name": str(destination.group),
        "encoding": MQENC_NATIVE,
        "coded_char_set_id": CCSID_UTF8,
        "format": FORMAT_MRS,
        "put_appl_type": PUT_APPL_TYPE_MRS,
        "put_appl_name": put_appl_name[: DEAD_LETTER_FIELD_CHARS_MAX["put_appl_name"]],
        "put_date": time.strftime("%Y%m%d", stamp),
        "put_time": time.strftime("%H%M%S", stamp) + f"{hundredths:02d}",
        "text": text,
    }


REQUIRED_FIELDS = {"reason": int, "dest_q_name": str, "dest_q_mgr_name": str}


_KIND_WORDS = {int: "an int", str: "a str"}
"""A required field's type as a refusal names it ("must be an int", not "a int")."""


def header_problem(header: object) -> str | None:
    """Why an application's own dead-letter header is unusable, or None. A field
    left out is said to be missing: it was told "must be a str", as if one were given."""
    if not isinstance(header, dict):
        return "dead_letter_header must be a dict"
    for name, kind in REQUIRED_FIELDS.items():
        if name not in header:
            return f"dead_letter_header.{name} is missing ({_KIND_WORDS[kind]})"
        value = header[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            got = type(value).__name__
            return f"dead_letter_header.{name} must be {_KIND_WORDS[kind]}, got {got}"
    return None


def own_header_problem(header: object) -> str | None:
    """Why a dead-letter header an application puts with its message is refused, or
    None: unusable (`header_problem`), or a text field longer than MQDLH holds. Only
    a put is asked; a header already stored is read back as it is."""
    if (problem := header_problem(header)) is not None:
        return problem
    assert isinstance(header, dict)
    for name, chars_max in DEAD_LETTER_FIELD_CHARS_MAX.items():
        value = header.get(name)
        if isinstance(value, str) and len(value) > chars_max:
            return (
                f"dead_letter_header.{name} has {len(value)} characters; "
                f"MQDLH holds at most {chars_max}"
            )
    return None
