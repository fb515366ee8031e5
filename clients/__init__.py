"""What applications import: connect to a group server, put, get, confirm.

async with connect("127.0.0.1:7001", queue="1.10") as q:
    psb = await q.put(b"shift totals", target="2.20",
                      delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
    msg = await q.get(timeout=5.0)
    await q.confirm(msg.seq)
"""

import mrs  # noqa: F401 - first: it installs the compiled hot path (mrs.native) if built
from clients.auth import ClientCredentials
from clients.batch import PutItem
from clients.connecting import connect, instance_addresses, put_once
from clients.connection import Client, JournalEvent
from clients.errors import (
    BadParameter,
    BadSequence,
    ConnectionLost,
    FieldRefused,
    JournalBusy,
    JournalFailed,
    JournalFull,
    KeyReused,
    MessageTooBig,
    MrsError,
    MrsTimeout,
    NoMoreMessages,
    NoSuchQueue,
    NotAttached,
    NotAuthorized,
    NotSupported,
    ProtocolFailure,
    PutOutcomeUnknown,
    QueueBusy,
    QuotaExceeded,
    ReplyTimeout,
    ServerError,
    ShuttingDown,
    TooManyUnconfirmed,
)
from clients.journal_reader import JournalReader, JournalRecord, open_journal
from clients.journal_remote import PcjState, RemoteJournalReader
from clients.protection import Protection, ProtectionRefused
from clients.reconnect import Reconnect
from clients.sync import SyncClient, connect_sync
from clients.tls import TlsRefused, tls_context
from mrs.core.selection import Key, Selection
from mrs.model import Address, DeliveryMode, ForceJrn, Message, Psb, Status, Uma

__all__ = [
    "Address",
    "BadParameter",
    "BadSequence",
    "Client",
    "ClientCredentials",
    "ConnectionLost",
    "FieldRefused",
    "DeliveryMode",
    "ForceJrn",
    "JournalBusy",
    "JournalEvent",
    "JournalFailed",
    "JournalFull",
    "JournalReader",
    "JournalRecord",
    "PcjState",
    "RemoteJournalReader",
    "Key",
    "KeyReused",
    "Message",
    "MessageTooBig",
    "MrsError",
    "MrsTimeout",
    "NoMoreMessages",
    "NoSuchQueue",
    "NotAttached",
    "NotAuthorized",
    "NotSupported",
    "ProtocolFailure",
    "Psb",
    "Protection",
    "PutItem",
    "ProtectionRefused",
    "PutOutcomeUnknown",
    "QueueBusy",
    "Selection",
    "QuotaExceeded",
    "Reconnect",
    "ReplyTimeout",
    "ServerError",
    "ShuttingDown",
    "Status",
    "SyncClient",
    "TlsRefused",
    "TooManyUnconfirmed",
    "Uma",
    "connect",
    "instance_addresses",
    "put_once",
    "connect_sync",
    "open_journal",
    "tls_context",
]
