"""One error tree: every status a user can see has its class; timeouts are told apart."""

from __future__ import annotations

import pickle

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import clients
import clients.connection
import clients.get_pool
from mrs import errors
from mrs import protocol as wire
from mrs.config.bus import ConfigError
from mrs.core.delivery import Refused
from mrs.model import Status
from mrs.offline.selection import SelectionError
from tests.client_helpers import silent_server

# The statuses a client can be answered with, and the class it must raise for each.
CLASS_FOR_STATUS = {
    Status.TIMEOUT: clients.MrsTimeout,
    Status.NOMOREMSG: clients.NoMoreMessages,
    Status.NOTSUPPORTED: clients.NotSupported,
    Status.BADDELIVERY: clients.NotSupported,
    Status.BADUMA: clients.NotSupported,
    Status.BADSEQ: clients.BadSequence,
    Status.EXCMAXUNCONF: clients.TooManyUnconfirmed,
    Status.NOSUCHQUEUE: clients.NoSuchQueue,
    Status.NOTATTACHED: clients.NotAttached,
    Status.QUEUE_BUSY: clients.QueueBusy,
    Status.MSGTOOBIG: clients.MessageTooBig,
    Status.BADPARAM: clients.BadParameter,
    Status.EXCEEDQUOTA: clients.QuotaExceeded,
    Status.JOURNAL_FAIL: clients.JournalFailed,
    Status.JOURNAL_FULL: clients.JournalFull,
    Status.SERVER_ERROR: clients.ServerError,
    Status.SHUTTING_DOWN: clients.ShuttingDown,
    Status.KEY_REUSED: clients.KeyReused,
    Status.PROTOCOL_ERROR: clients.ProtocolFailure,
}


@pytest.mark.parametrize("status", list(CLASS_FOR_STATUS), ids=lambda status: status.name)
def test_each_status_a_user_sees_has_its_class(status: Status) -> None:
    error = errors.error_for(int(status), "why")
    assert type(error) is CLASS_FOR_STATUS[status]
    assert isinstance(error, clients.MrsError)
    assert error.status is status
    assert str(error) == f"mrs: {status.name}: why"


@given(st.integers(min_value=-(2**31), max_value=2**31), st.text(max_size=40))
def test_any_status_gives_a_one_root_error(status: int, message: str) -> None:
    error = errors.error_for(status, message)
    assert isinstance(error, clients.MrsError)
    assert int(error.status) == status
    assert error.message == message
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert (again.status, again.message, str(again)) == (error.status, error.message, str(error))


def test_a_reply_timeout_is_not_a_server_timeout() -> None:
    assert not issubclass(clients.ReplyTimeout, clients.MrsTimeout)
    assert not issubclass(clients.MrsTimeout, clients.ReplyTimeout)
    assert issubclass(clients.ReplyTimeout, TimeoutError)
    assert issubclass(clients.MrsTimeout, TimeoutError)


def test_the_server_families_share_the_root() -> None:
    """What the server, the protocol and the tools raise is an MrsError with a status;
    callers that catch ValueError keep working where they did."""
    cases = [
        (Refused(Status.BADSEQ, "no such seq"), Status.BADSEQ, "no such seq"),
        (wire.RemoteProtocolError("bad frame"), Status.PROTOCOL_ERROR, "bad frame"),
        (ConfigError("bus.toml", "group[0].id", "must be  an int"), Status.BADPARAM, None),
        (SelectionError("not a duration: 'x'"), Status.BADPARAM, "not a duration: 'x'"),
    ]
    for error, status, text in cases:
        assert isinstance(error, errors.MrsError)
        assert error.status is status
        if text is not None:
            assert str(error) == text
    assert str(cases[2][0]) == "bus.toml: group[0].id: must be an int"
    assert isinstance(cases[3][0], ValueError)


async def test_asilent_server_gives_a_reply_timeout(monkeypatch) -> None:
    """No answer at all is ReplyTimeout (the request may have been acted on), not the
    server's TIMEOUT answer."""
    for module in (clients.connection, clients.get_pool):  # a get reads it in either
        monkeypatch.setattr(module, "REPLY_GRACE_S", 0.05)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_server)
        async with clients.connect(f"127.0.0.1:{port}", queue="1.10") as client:
            with pytest.raises(clients.ReplyTimeout) as timed_out:
                await client.get(timeout=0.05)
            assert timed_out.value.status is Status.TIMEOUT
            assert not isinstance(timed_out.value, clients.MrsTimeout)
        nursery.cancel_scope.cancel()


def test_the_tool_errors_share_the_root() -> None:
    """The DLQ rules table, the audit's source options and its command line: each an
    operator's mistake under the one root with BADPARAM, its text kept as it was."""
    from mrs.audit.command import AuditUsageError
    from mrs.dlq.parser import RulesError, parse_table

    with pytest.raises(RulesError) as caught:
        parse_table("INPUTQ(1.10) NOSUCHKEYWORD\nACTION(DISCARD)\n")
    rules_error = caught.value
    assert isinstance(rules_error, errors.OperatorError)
    assert isinstance(rules_error, ValueError)
    assert rules_error.status is Status.BADPARAM
    assert rules_error.problems
    assert str(rules_error) == "\n".join(str(problem) for problem in rules_error.problems)
    again = pickle.loads(pickle.dumps(rules_error))
    assert (type(again), str(again), again.problems) == (
        RulesError,
        str(rules_error),
        rules_error.problems,
    )

    usage = AuditUsageError("--group goes with --config")
    assert isinstance(usage, errors.OperatorError)
    assert usage.status is Status.BADPARAM
    assert str(usage) == "--group goes with --config"


def test_the_audit_source_error_shares_the_root() -> None:
    source = pytest.importorskip("mrs.audit.source", reason="the audit source needs pyspark")
    error = source.SourceError("option group goes with exactly one path")
    assert isinstance(error, errors.OperatorError)
    assert isinstance(error, ValueError)
    assert error.status is Status.BADPARAM
    assert str(error) == "option group goes with exactly one path"


def test_journal_errors_stay_outside_by_design() -> None:
    """journals/ is a library without MRS concepts: its root is its own."""
    import journals

    assert not issubclass(journals.JournalError, errors.MrsError)
    assert "imports nothing of `mrs`" in journals.__doc__
