"""A key rotated (`mrs keys rotate`) under a program that runs on with the key it
loaded (docs/security-protection.md, "Rotating a key").

Before: a running signer went on signing with the old key, and its readers (who
verify with the new NAME.pub) refused every such message to the DLQ, where no key
could verify it again; a running reader refused to the DLQ each message sealed for
its new key. Now both are refused before anything is sent or taken, and the messages
wait for the restarted program. The group runs in this trio run (sim/membus.py); the
protection is the client's alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clients import DeliveryMode, NoMoreMessages, Protection, ProtectionRefused
from mrs.protection.errors import MQRC_SECURITY_ERROR
from mrs.protection.keys import (
    Identity,
    Keyring,
    load_public_keys,
    rotate_identity,
    write_identity,
)

POLICY = """
keys_dir = "keys"
[[policy]]
queue = "1.11"
protection = "privacy"
signers = ["SHOP"]
recipients = ["BILLING"]
"""


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """SHOP and BILLING's keys in `keys` (also the policy's keys_dir), as `mrs keys new`
    and `mrs keys rotate --out keys` leave them on one machine."""
    for name in ("SHOP", "BILLING"):
        write_identity(Identity.generate(name), tmp_path / "keys")
    (tmp_path / "protection.toml").write_text(POLICY)
    return tmp_path


def load(scratch: Path, name: str) -> Protection:
    """What a program does when it starts."""
    return Protection.load(scratch / "protection.toml", identity=scratch / "keys" / f"{name}.key")


async def put(mem_bus, protection: Protection, body: bytes) -> None:
    async with mem_bus.connect("SENDER", protection=protection) as sender:
        await sender.put(body, target="1.11", delivery=DeliveryMode.WF_DQF)


async def test_a_signer_still_running_after_its_rotation_sends_nothing(mem_bus, scratch) -> None:
    running = load(scratch, "SHOP")
    rotate_identity("SHOP", scratch / "keys")
    with pytest.raises(ProtectionRefused, match="rotated after this application") as refused:
        await put(mem_bus, running, b"signed with the old key")
    assert refused.value.reason == MQRC_SECURITY_ERROR and "nothing was sent" in str(refused.value)

    await put(mem_bus, load(scratch, "SHOP"), b"signed with the new key")  # restarted
    async with mem_bus.connect("ANYORDER", protection=load(scratch, "BILLING")) as billing:
        message = await billing.get(timeout=5)  # no unverifiable message before it
        assert message.body == b"signed with the new key"
        await message.confirm()
        with pytest.raises(NoMoreMessages):
            await billing.get(timeout=0)


async def test_a_reader_still_running_after_its_rotation_takes_nothing(mem_bus, scratch) -> None:
    shop, running = load(scratch, "SHOP"), load(scratch, "BILLING")
    await put(mem_bus, shop, b"sealed for the old key")
    rotate_identity("BILLING", scratch / "keys")
    await put(mem_bus, shop, b"sealed for the new key")  # SHOP reads the new BILLING.pub
    async with mem_bus.connect("ANYORDER", protection=running) as stale:
        for _ in range(2):  # neither message is taken, so none is refused to the DLQ
            with pytest.raises(ProtectionRefused, match="nothing was taken") as refused:
                await stale.get(timeout=5)
            assert not refused.value.dead_lettered
    async with mem_bus.connect("ANYORDER", protection=load(scratch, "BILLING")) as billing:
        bodies = []
        for _ in range(2):
            message = await billing.get(timeout=5)
            bodies.append(message.body)
            await message.confirm()
    assert bodies == [b"sealed for the old key", b"sealed for the new key"]


def test_a_key_copied_over_its_file_with_cp_p_is_read_again(tmp_path: Path) -> None:
    """`cp -p new/SHOP.pub keys/` keeps the file's inode and size and sets its
    modification time to the source's: a keyring that cached the old key by those
    alone went on using it. The change time tells the copy."""
    old, new = tmp_path / "old", tmp_path / "new"
    write_identity(Identity.generate("SHOP"), old)
    write_identity(Identity.generate("SHOP"), new)
    keyring = Keyring(old)
    before = keyring.get("SHOP").verify_key.public_bytes_raw()
    target, source = old / "SHOP.pub", new / "SHOP.pub"
    stat = target.stat()
    assert source.stat().st_size == stat.st_size
    with open(target, "r+b") as file:  # in place, as cp does: the same inode
        file.write(source.read_bytes())
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # -p: the old times
    assert (target.stat().st_ino, target.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    after = keyring.get("SHOP").verify_key.public_bytes_raw()
    assert after != before and after == load_public_keys(source).verify_key.public_bytes_raw()
