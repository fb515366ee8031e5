"""The put path's grant check under [auth]: a put carrying headers (every put of a
resending client carries its idempotency key) is decided once per target, not
resolved, spelled and matched again at each put; and the remembered decisions are
the ones the rules give afresh, across header kinds, a grant reload and a queue
added at run time."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from mrs import protocol as wire
from mrs.config.bus import load_config
from mrs.errors import Refused
from mrs.group.dlq_leases import CONTEXT_HEADER
from mrs.group.shapes import DEAD_LETTER_HEADER, IDEMPOTENCY_HEADER
from mrs.model import Address
from mrs.security import permissions as rules
from mrs.security.gate import Gate
from mrs.security.session_auth import build
from tests.auth_helpers import SecureBus, mrs

TARGETS = ("1.10", "IN", "G1.IN", "1.11", "G1.OTHER", "2.10", "G2.IN", "1.96", "1.13")
HEADER_SETS: tuple[dict | None, ...] = (
    None,
    {"app": 1},
    {DEAD_LETTER_HEADER: {}},
    {CONTEXT_HEADER: "x"},
    {"replay": {"journal": "pcj"}},
    {"replay": {"journal": "dlj"}},
    {"replay": {"journal": "other"}},
    {"replay": "not a table"},
)


def a_gate(directory: Path) -> tuple[Gate, Path]:
    secure = SecureBus(directory)  # the files only: no process is started
    assert secure.config_path is not None
    bus = load_config(secure.config_path)
    authority, gate = build(bus, bus.groups[1])
    assert authority is not None and gate is not None
    return gate, secure.config_path


def a_put(target: str, headers: dict | None, resp_q: str = "") -> wire.Put:
    return wire.Put(1, target, b"x", 1, 1, 0, 0, 0, 0, b"", resp_q, headers)


def answer(gate: Gate, principal: str, event: wire.Put) -> str | None:
    session = SimpleNamespace(principal=principal, attached=None, peer="test")
    try:
        gate.check(session, event)
    except Refused as refused:
        return str(refused)
    return None


def test_a_resending_clients_puts_spell_their_target_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, _ = a_gate(tmp_path)
    spelled: list[Address] = []
    real = rules.spellings

    def counted(bus, here: int, address: Address) -> tuple[str, ...]:
        spelled.append(address)
        return real(bus, here, address)

    monkeypatch.setattr(rules, "spellings", counted)
    for key in range(50):  # a new idempotency key on each put, as a resender sends
        put = a_put("G1.IN", {IDEMPOTENCY_HEADER: f"app:{key}"})
        assert answer(gate, "producer", put) is None
        assert answer(gate, "reader", put) is not None
    assert spelled == [Address(1, 10), Address(1, 10)]  # once per principal
    for journal in (f"journal-{n}" for n in range(50)):  # texts the rules read alike
        assert answer(gate, "replayer", a_put("1.10", {"replay": {"journal": journal}})) is None
    assert len(spelled) == 3


def decisions(gate_of, principals: tuple[str, ...]) -> dict[tuple, str | None]:
    """Every (principal, target, headers, resp_q) answered by the gate `gate_of()`."""
    found = {}
    cases = itertools.product(principals, TARGETS, range(len(HEADER_SETS)), ("", "1.13", "1.11"))
    for principal, target, headers, resp_q in cases:
        put = a_put(target, HEADER_SETS[headers], resp_q)
        found[(principal, target, headers, resp_q)] = answer(gate_of(), principal, put)
    return found


def test_remembered_decisions_are_the_rules_answers(tmp_path: Path) -> None:
    gate, config = a_gate(tmp_path)
    principals = ("producer", "reader", "dlqadmin", "replayer", "thief", "nobody")

    def fresh() -> Gate:
        return Gate(gate.authority, gate.bus, gate.group_id)

    expected = decisions(fresh, principals)
    assert decisions(lambda: gate, principals) == expected  # learnt
    assert decisions(lambda: gate, principals) == expected  # remembered
    assert len({answer is None for answer in expected.values()}) == 2  # both kinds seen
    mrs("creds", "grant", "reader", "--config", str(config), "--put", "G1.*",
        "--admin", "dlq")  # fmt: skip
    assert gate.authority.reload("test")
    changed = decisions(fresh, principals)
    assert changed != expected
    assert decisions(lambda: gate, principals) == changed


def test_a_queue_added_at_run_time_is_decided_afresh(tmp_path: Path) -> None:
    """A put to 1.50 before the queue exists is refused ("G1.L*" matches none of its
    spellings) and remembered; once added as LATE, "G1.LATE" is one of them."""
    gate, config = a_gate(tmp_path)
    mrs("creds", "grant", "producer", "--config", str(config), "--put", "G1.L*")
    assert gate.authority.reload("test")
    put = a_put("1.50", {IDEMPOTENCY_HEADER: "app:1"})
    assert answer(gate, "producer", put) is not None
    queues = gate.bus.groups[1].queues
    queues[50] = dataclasses.replace(queues[10], id=50, name="LATE")  # as add-queue does
    gate.forget_decisions()  # what `mrs admin add-queue` calls next
    assert answer(gate, "producer", put) is None
    assert answer(gate, "reader", put) is not None
