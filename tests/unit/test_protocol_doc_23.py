"""docs/protocol.md against mrs.protocol: the page a third-party implementer writes a
client from cannot drift from the code.

Each table of the page is parsed and checked against the event structs it describes:
every event with its code and every field in wire order, defaults marked as they are;
every field's wire type; every status, UMA and force_j number; the protocol version;
the authentication frames; and the byte-by-byte example. Why: a raw-socket client
written from the page alone (msgpack, no project code) could not decode a Delivery
(its fields were "..."), did not know the protocol version, the status numbers or
that a seq is a uint64, and had no AdminRequest, while Hello and Welcome carried a
field the page did not show. The answers the server gives to each frame the page
calls invalid are held by tests/process/test_protocol_doc_23.py.
"""

from __future__ import annotations

import ast
import re
import struct
from pathlib import Path
from typing import Any

import msgpack
import msgspec
from msgspec import inspect as mi

from mrs.model import DeliveryMode, ForceJrn, Status, Uma
from mrs.protocol import PROTOCOL_VERSION, Connection, Get, Hello, Put
from mrs.protocol.base import EventStruct
from mrs.protocol.checks import INT32, INT64
from mrs.security import handshake

PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
MODES_PAGE = PAGE.parent / "delivery-modes.md"

_SIGNATURE = re.compile(r"`(\w+)\(([^`]*)\)`")


def page_text(path: Path | None = None) -> str:
    return (path or PAGE).read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The text under `## heading` (or ###), up to the next heading of any level."""
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"docs/protocol.md has no section {heading!r}"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first markdown table in `text`, cells stripped."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if all(set(cell) <= set("-: ") for cell in cells):
            continue
        rows.append(cells)
    return rows[1:]  # the header row


def event_classes() -> dict[int, Any]:
    """Every event class of mrs.protocol by its wire code."""
    found: dict[int, Any] = {}
    stack = list(EventStruct.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        tag = cls.__struct_config__.tag
        if isinstance(tag, int):
            assert tag not in found, f"code {tag} used by {found[tag]} and {cls}"
            found[tag] = cls
    return found


def struct_info(cls: Any) -> Any:
    """msgspec's view of an event class: its fields with their types and defaults."""
    return mi.type_info(cls)


def literal(text: str) -> Any:
    """A value as the page writes it: nil, false, true, an int, "str", b"", []."""
    words = {"nil": None, "false": False, "true": True}
    return words[text] if text in words else ast.literal_eval(text)


def documented_events() -> dict[str, tuple[int, list[tuple[str, Any]]]]:
    """name -> (code, [(field, default or NO_DEFAULT)]) from the Events table."""
    out: dict[str, tuple[int, list[tuple[str, Any]]]] = {}
    for code_cell, event_cell, *_ in table_rows(section(page_text(), "Events")):
        codes = [int(code) for code in code_cell.split("/")]
        signatures = _SIGNATURE.findall(event_cell)
        assert len(signatures) == len(codes), f"row {code_cell}: {event_cell[:80]}"
        for code, (name, fields) in zip(codes, signatures, strict=True):
            parsed = []
            for item in filter(None, (part.strip() for part in fields.split(","))):
                name_part, eq, default = item.partition("=")
                parsed.append((name_part.strip(), literal(default) if eq else NO_DEFAULT))
            out[name] = (code, parsed)
    return out


NO_DEFAULT = object()


def test_every_event_is_in_the_table_with_its_code_fields_and_defaults() -> None:
    documented = documented_events()
    classes = event_classes()
    assert sorted(code for code, _ in documented.values()) == sorted(classes)
    for name, (code, fields) in documented.items():
        cls = classes[code]
        assert cls.__name__ == name, f"code {code} is {cls.__name__}, the page says {name}"
        info = {field.name: field for field in struct_info(cls).fields}
        assert [field for field, _ in fields] == list(cls.__struct_fields__), name
        for field, default in fields:
            wanted = info[field]
            if wanted.required:
                assert default is NO_DEFAULT, f"{name}.{field} has no default"
                continue
            actual = (
                wanted.default
                if wanted.default is not msgspec.NODEFAULT
                else wanted.default_factory()
            )
            assert default is not NO_DEFAULT, f"{name}.{field} defaults to {actual!r}: say so"
            assert default == actual and type(default) is type(actual), f"{name}.{field}"


# -- field types ----------------------------------------------------------------------

_BOUND_WORDS = {
    INT64[0]: "-2**63",
    INT64[1]: "2**63-1",
    INT32[0]: "-2**31",
    INT32[1]: "2**31-1",
    None: "2**64-1",
}


def int_words(info: Any) -> str:
    lo = INT64[0] if info.ge is None else info.ge
    return f"int {_BOUND_WORDS.get(lo, lo)}..{_BOUND_WORDS.get(info.le, info.le)}"


def length_words(info: Any, unit: str) -> str:
    if info.min_length is None and info.max_length is None:
        return ""
    if info.max_length is None:
        return f" ({info.min_length}+ {unit})"
    return f" ({info.min_length or 0}..{info.max_length} {unit})"


def describe(info: Any) -> str:
    """A field's wire type in the words of the page's Field types table."""
    if isinstance(info, mi.IntType):
        return int_words(info)
    if isinstance(info, mi.BoolType):
        return "bool"
    if isinstance(info, mi.StrType):
        return "str" + length_words(info, "chars")
    if isinstance(info, mi.BytesType):
        return "bin" + length_words(info, "bytes")
    if isinstance(info, mi.LiteralType):
        return " or ".join(f'"{value}"' for value in sorted(map(str, info.values)))
    if isinstance(info, mi.DictType):
        return "map"
    if isinstance(info, mi.StructType):
        return info.cls.__name__
    if isinstance(info, mi.UnionType):
        bases = {type_.cls.__mro__[1] for type_ in info.types if isinstance(type_, mi.StructType)}
        if len(bases) == 1 and len(info.types) > 2:  # a tagged union: its base names it
            return bases.pop().__name__
        return " or ".join(describe(item) for item in info.types)
    if isinstance(info, mi.NoneType):
        return "nil"
    if isinstance(info, mi.ListType):
        items = "" if isinstance(info.item_type, mi.AnyType) else f" of {describe(info.item_type)}"
        return f"array{length_words(info, 'items')}{items}"
    raise AssertionError(f"no words for {info}")


def documented_types() -> dict[str, str]:
    """`field` or `Event.field` -> its type, from the Field types table."""
    out: dict[str, str] = {}
    for names, words, *_ in table_rows(section(page_text(), "Field types")):
        for name in re.findall(r"`([\w.]+)`", names):
            assert name not in out, f"{name} twice in Field types"
            out[name] = words
    return out


def test_every_field_has_its_wire_type_in_the_table() -> None:
    documented = documented_types()
    used: set[str] = set()
    for cls in event_classes().values():
        for field in struct_info(cls).fields:
            qualified = f"{cls.__name__}.{field.name}"
            key = qualified if qualified in documented else field.name
            assert key in documented, f"{qualified} has no row in Field types"
            assert documented[key] == describe(field.type), qualified
            used.add(key)
    assert sorted(set(documented) - used) == [], "rows of fields no event has"


# -- numbers ----------------------------------------------------------------------------


def named_numbers(text: str) -> dict[str, int]:
    """`NAME` number pairs, as the Numbers on the wire section lists them."""
    return {name: int(number) for name, number in re.findall(r"`([A-Z][A-Z_]+)` (-?\d+)", text)}


def test_status_uma_and_force_j_numbers_are_the_codes() -> None:
    text = page_text()
    assert named_numbers(section(text, "Statuses")) == {s.name: int(s) for s in Status}
    assert named_numbers(section(text, "UMAs")) == {uma.name: int(uma) for uma in Uma}
    assert named_numbers(section(text, "force_j")) == {f.name: int(f) for f in ForceJrn}


def test_delivery_mode_numbers_the_page_points_to_are_the_codes() -> None:
    named = re.findall(r"\b([A-Z]{2}_[A-Z]{3,4}) (\d+)\b", page_text(MODES_PAGE))
    assert dict((name, int(number)) for name, number in named) == {
        mode.name: int(mode) for mode in DeliveryMode
    }
    assert "delivery-modes.md" in section(page_text(), "Numbers on the wire")


def test_protocol_version_is_the_one_the_page_states() -> None:
    match = re.search(r"`protocol_version` is (\d+)", page_text())
    assert match and int(match.group(1)) == PROTOCOL_VERSION


# -- frames ---------------------------------------------------------------------------


def test_the_byte_by_byte_get_is_what_the_connection_sends() -> None:
    block = re.search(r"```text\n(00 00 00 05.*?)```", page_text(), re.S)
    assert block
    hex_bytes = "".join(
        line.split("  ")[0].replace(" ", "") for line in block.group(1).splitlines()
    )
    client = Connection("client")
    client.send(Hello(PROTOCOL_VERSION, "doc"))
    assert client.send(Get(7, 0)) == bytes.fromhex(hex_bytes)


def test_a_client_that_leaves_out_defaulted_fields_is_read() -> None:
    """The page: a field with a default may be left out with every field after it."""
    server = Connection("server")
    hello = msgpack.packb([1, PROTOCOL_VERSION, "raw"], use_bin_type=True)
    put = msgpack.packb([12, 1, "Q", b"x", 26, 2, 0, 0, 0, 0, b"", ""], use_bin_type=True)
    server.receive_data(b"".join(struct.pack(">I", len(f)) + f for f in (hello, put)))
    first, second = server.events()
    assert first == Hello(PROTOCOL_VERSION, "raw")
    assert isinstance(second, Put) and second.headers is None


def test_authentication_frames_hold_the_keys_the_handshake_uses() -> None:
    """The keys of each auth frame on the page are the ones mrs.security.handshake
    writes and reads (a client from the page must send what the server reads)."""
    rows = {row[0]: row[1] for row in table_rows(section(page_text(), "Authentication frames"))}
    keys = {frame: set(re.findall(r'"(\w+)":', content)) for frame, content in rows.items()}
    assert keys == {
        "challenge": {"auth", "name", "nonce", "salt", "iterations", "group"},
        "proof": {"proof"},
        "answer": {"ok", "signature"},
        "refusal": {"ok", "status", "message"},
    }
    source = Path(handshake.__file__).read_text(encoding="utf-8")
    for key in set().union(*keys.values()) | {"peer_proof"}:
        assert f'"{key}"' in source, key


def test_auth_message_is_laid_out_as_the_page_says() -> None:
    """AuthMessage, which both proofs cover, byte for byte as the page builds it."""
    text = section(page_text(), "Authentication frames")
    match = re.search(r"AuthMessage is the msgpack array `(\[.*?\])`", text)
    assert match
    names: dict[str, object] = {"name": "shop", "cn": b"c" * 24, "sn": b"s" * 24}
    names |= {"salt": b"t" * 16, "iterations": 100_000, "group": 2}
    items = [
        names[item] if item in names else literal(item)
        for item in (part.strip() for part in match.group(1).strip("[]").split(","))
    ]
    said = msgpack.packb(items, use_bin_type=True)
    assert said == handshake.auth_message("shop", b"c" * 24, b"s" * 24, b"t" * 16, 100_000, 2)
