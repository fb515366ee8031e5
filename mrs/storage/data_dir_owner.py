"""Which group a data directory belongs to, written in it, checked at every start.

Why: three instances of a replicated group each keep their journals in their own
data directory, and a config edited by hand (a copied block, a wrong path) can point
an instance of one group at another group's journals. Opened there, it would serve
(or, as a replica, be sent a full copy over) messages that are not its group's: an
acknowledged message of the other group gone or delivered to the wrong queues. The
replica's group check at hello comes too late for that, and names nothing on disk.

So the directory says whose it is: `group.json` holds the group id, its name and the
coordinator key of the group (`<[coordinator] prefix>/<group id>`, which tells two
buses' groups of the same id apart). The first start writes it (into a directory
that has none: a new one, or one from before this file existed, which is adopted),
a `mrs serve --group` once its ports are bound (`GroupServer.claim_data_dir`), an
instance once its replication address is (`InstanceRunner.claim_data_dir`): a start
refused for a port in use leaves a new directory unmade and unclaimed;
every later start compares it before anything is opened or locked, and refuses a
directory of another group with one line (DataDirError): nothing is read, written or
lost. The name is shown, not compared: renaming a group keeps its journals.

An instance of a replicated group also records its name (`instance`). Its journals
follow the group's active; a plain `mrs serve` of them (the instances taken out of
the config, a copied block pointing at them) took puts and confirms the group never
saw, which the instance then had to throw away for a full copy when it rejoined
(mrs.replication.replica). So a server that is not that instance is refused at once,
in one line naming the instance and the way out: serve it as that instance, or delete
the `instance` entry to make these journals a group of their own on purpose. A
directory recorded without an instance (an unreplicated group made replicated, or a
file from before the entry) is taken by the instance that starts on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mrs.core.seqspace import GROUP_KEY
from mrs.storage.atomic_file import create_file, replace_file
from mrs.storage.datadir import DataDirError

OWNER_FILE_NAME = "group.json"


def owner_of(
    group_id: int, group_name: str, coordinator_key: str, instance: str | None = None
) -> dict[str, object]:
    """What a group's data directory records about it (`instance`: the instance of a
    replicated group whose journals these are; None for an unreplicated group)."""
    owner: dict[str, object] = {
        "group_id": group_id,
        "group": group_name,
        "coordinator": coordinator_key,
    }
    if instance is not None:
        owner["instance"] = instance
    return owner


def claim_data_dir(data_dir: Path, owner: dict[str, object], who: str) -> None:
    """Refuse `data_dir` if it records another owner; record `owner` if it records
    none. `who` names the server in the refusal ("instance a of group 1")."""
    data_dir = Path(data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        return  # not a directory: the start-up checks say so in their own words
    path = data_dir / OWNER_FILE_NAME
    recorded = _recorded(path)
    if recorded is None:
        if _write_new(path, owner):
            return
        recorded = _recorded(path)  # another server recorded it first: compared below
        assert recorded is not None, "a file linked into place is not removed"
    if (recorded.get("group_id"), recorded.get("coordinator")) != (
        owner["group_id"],
        owner["coordinator"],
    ):
        fix = "point its data_dir at its own directory"
        if recorded.get("group_id") == owner["group_id"]:  # another bus, or a moved prefix
            fix += f" (or, if [coordinator] prefix was changed on purpose, remove {path})"
        raise DataDirError(
            f"data_dir {data_dir} belongs to group {recorded.get('group_id')} "
            f"({recorded.get('group')}, coordinator key {recorded.get('coordinator')}), "
            f"not to {who} ({owner['group']}, coordinator key {owner['coordinator']}): "
            f"{fix}; nothing was opened"
        )
    _check_instance(path, recorded, owner, who)


def _check_instance(
    path: Path, recorded: dict[str, object], owner: dict[str, object], who: str
) -> None:
    """The group matches: refuse a server that is not the instance recorded, record
    the instance in a directory that names none."""
    mine, theirs = owner.get("instance"), recorded.get("instance")
    if theirs is None:
        if mine is not None:
            _write(path, {**recorded, "instance": mine})
        return
    if mine == theirs:
        return
    serve = f"serve it as that instance (mrs serve --instance {theirs})"
    raise DataDirError(
        f"data_dir {path.parent} holds the journals of instance {theirs} of replicated "
        f"group {recorded.get('group_id')} ({recorded.get('group')}), not {who}'s: {serve}; "
        f'to make them a group of their own on purpose, delete "instance" from {path} '
        "(the other instances' journals then no longer follow them); nothing was opened"
    )


def _recorded(path: Path) -> dict[str, object] | None:
    """The owner recorded at `path`; None if there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise DataDirError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        recorded = json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError too: bytes no editor saves as text
        recorded = None
    if not isinstance(recorded, dict) or not _is_group_id(recorded.get("group_id")):
        raise DataDirError(
            f"{path}: not the JSON object mrs writes (a group_id number, its group "
            "name and coordinator key); restore it, or remove it if this directory is "
            "this group's (the next start records it again)"
        )
    return recorded


def _is_group_id(value: object) -> bool:
    """Whether a recorded group_id is one mrs wrote: an integer. Why: edited by hand to
    "1", it was compared with the group's 1 and refused as "belongs to group 1 ...,
    not to group 1", a line that names no fault."""
    return isinstance(value, int) and not isinstance(value, bool)


def _write_new(path: Path, owner: dict[str, object]) -> bool:
    """Record the first owner of a directory that records none: True if this server
    did; False if another recorded one meanwhile. Why not `_write`: two servers of two
    groups started at once on one new directory both found no file and both renamed
    theirs into place; the one whose journals stayed could be the one whose name the
    file no longer held, refused at its next start."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return create_file(path, (json.dumps(owner) + "\n").encode("utf-8"), 0o600)
    except OSError as error:
        raise DataDirError(f"{path}: cannot be written ({error.strerror})") from None


def _write(path: Path, owner: dict[str, object]) -> None:
    """Write the owner file whole (a temporary file renamed over it, both synced): a
    crash leaves the old state or the new one, never half a file."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # owner-only whatever the umask, as every file of a data directory
        replace_file(path, (json.dumps(owner) + "\n").encode("utf-8"), 0o600)
    except OSError as error:
        raise DataDirError(f"{path}: cannot be written ({error.strerror})") from None


def check_journals_group(store: Any, journals: Path, group_id: int, who: str) -> None:
    """Refuse journals another group wrote (META `journals_group`, mrs.core.seqspace).

    Why beside `group.json`: that file says whose the data directory is, but a
    `journals/` copied in from another group's directory (a restore from the wrong
    backup, a `cp -r` of the wrong group) kept this group's `group.json`, and the
    server delivered the other group's stored messages on its own queues of the same
    numbers, as first deliveries, unmarked. Journals that name no group (written
    before the key existed, or new) are this group's from its first reservation on."""
    recorded = store.meta_get(GROUP_KEY.decode())
    if recorded is None:
        return
    text = bytes(recorded).decode("ascii", "replace")
    if text == str(group_id):
        return
    raise DataDirError(
        f"{journals} holds the journals of group {text}, not of {who}: copied from "
        f"another group's data directory? Put this group's journals back, or move "
        f"{journals} aside to start it empty; nothing was opened"
    )
