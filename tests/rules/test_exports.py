"""The public API of `clients` and `mrs`, pinned (as trio pins its own).

A name added, removed or renamed here is a change every application sees: update the
pin on purpose, and the docs with it.
"""

from __future__ import annotations

import importlib
import types

import clients
import mrs
from mrs import errors, model

CLIENTS_API = {
    # connecting
    "connect",
    "connect_sync",
    "Client",
    "SyncClient",
    "Reconnect",
    "JournalEvent",
    "ClientCredentials",
    "Protection",
    "tls_context",
    "PutItem",
    # selective gets (pams_get_msg's sel_filter, pams_set_select): mrs.core.selection
    "Selection",
    "Key",
    # a replicated group: its instance addresses, a put stored once across a failover
    "instance_addresses",
    "put_once",
    # reading a group's PCJ or DLJ from its files (pams_open_jrn/read_jrn/close_jrn)
    "open_journal",
    "JournalReader",
    "JournalRecord",
    # the same over the wire, and MRS_SET_PCJ (Client.open_journal, Client.set_pcj)
    "RemoteJournalReader",
    "PcjState",
    # the vocabulary (from mrs.model)
    "Address",
    "DeliveryMode",
    "ForceJrn",
    "Message",
    "Psb",
    "Status",
    "Uma",
    # the error tree (from mrs.errors)
    "MrsError",
    "MrsTimeout",
    "ReplyTimeout",
    "NoMoreMessages",
    "NotSupported",
    "BadSequence",
    "TooManyUnconfirmed",
    "NoSuchQueue",
    "NotAttached",
    "NotAuthorized",
    "QueueBusy",
    "MessageTooBig",
    "BadParameter",
    "QuotaExceeded",
    "JournalFailed",
    "JournalBusy",
    "JournalFull",
    "ServerError",
    "ShuttingDown",
    "KeyReused",
    "ProtocolFailure",
    "ConnectionLost",
    "FieldRefused",
    "PutOutcomeUnknown",
    # from clients.protection and clients.tls (MrsError subclasses)
    "ProtectionRefused",
    "TlsRefused",
}

ERRORS_API = {
    "BadParameter",
    "BadSequence",
    "ConnectionLost",
    "FieldRefused",
    "JournalBusy",
    "JournalFailed",
    "JournalFull",
    "KeyReused",
    "MessageTooBig",
    "MrsError",
    "MrsTimeout",
    "NoMoreMessages",
    "NoSuchQueue",
    "NotAttached",
    "NotAuthorized",
    "NotSupported",
    "ProtocolFailure",
    "PutOutcomeUnknown",
    "QueueBusy",
    "QuotaExceeded",
    "ReplyTimeout",
    "ServerError",
    "ShuttingDown",
    "TooManyUnconfirmed",
    # the server's families and the status -> class table
    "Refused",
    "ProtocolError",
    "OperatorError",
    "error_for",
}

MODEL_API = {
    "Address",
    "ConfirmStyle",
    "DeliveryMode",
    "ForceJrn",
    "InterestPoint",
    "Message",
    "Notification",
    "Psb",
    "RECOVERABLE_MODES",
    "Status",
    "Uma",
    "status_of",
}


def test_clients_all_is_pinned() -> None:
    assert set(clients.__all__) == CLIENTS_API
    assert len(clients.__all__) == len(set(clients.__all__))


def test_errors_all_is_pinned() -> None:
    assert set(errors.__all__) == ERRORS_API


def test_every_public_name_of_clients_is_in_all() -> None:
    """What `from clients import *` gives is what the package shows."""
    public = {
        name
        for name, value in vars(clients).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert public == set(clients.__all__)


def test_the_model_names_users_import() -> None:
    missing = {name for name in MODEL_API if not hasattr(model, name)}
    assert not missing


def test_clients_reexports_the_one_tree_and_the_one_model() -> None:
    """`clients.X` is the very object of mrs.errors / mrs.model: one class, caught
    the same whichever import the caller used."""
    for name in CLIENTS_API:
        value = getattr(clients, name)
        for home in (errors, model):
            if hasattr(home, name):
                assert getattr(home, name) is value, name
    for name in ERRORS_API - {"error_for"}:
        assert issubclass(getattr(errors, name), errors.MrsError), name
    # old import paths users have keep working
    assert importlib.import_module("clients.errors").MrsError is errors.MrsError
    assert importlib.import_module("clients.saf_journal").JournalFull is errors.JournalFull


def test_mrs_package_has_a_version() -> None:
    assert isinstance(mrs.__version__, str) and mrs.__version__
