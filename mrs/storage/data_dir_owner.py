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
that has none: a new one, or one from before this file existed, which is adopted);
every later start compares it before anything is opened or locked, and refuses a
directory of another group with one line (DataDirError): nothing is read, written or
lost. The name is shown, not compared: renaming a group keeps its journals.
"""

from __future__ import annotations

import json
from pathlib import Path

from mrs.storage.atomic_file import replace_file
from mrs.storage.datadir import DataDirError

OWNER_FILE_NAME = "group.json"


def owner_of(group_id: int, group_name: str, coordinator_key: str) -> dict[str, object]:
    """What a group's data directory records about it."""
    return {"group_id": group_id, "group": group_name, "coordinator": coordinator_key}


def claim_data_dir(data_dir: Path, owner: dict[str, object], who: str) -> None:
    """Refuse `data_dir` if it records another owner; record `owner` if it records
    none. `who` names the server in the refusal ("instance a of group 1")."""
    data_dir = Path(data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        return  # not a directory: the start-up checks say so in their own words
    path = data_dir / OWNER_FILE_NAME
    recorded = _recorded(path)
    if recorded is None:
        _write(path, owner)
        return
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


def _recorded(path: Path) -> dict[str, object] | None:
    """The owner recorded at `path`; None if there is no file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise DataDirError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        recorded = json.loads(text)
    except ValueError:
        recorded = None
    if not isinstance(recorded, dict):
        raise DataDirError(
            f"{path}: not the JSON object mrs writes; restore it, or remove it if this "
            "directory is this group's (the next start records it again)"
        )
    return recorded


def _write(path: Path, owner: dict[str, object]) -> None:
    """Write the owner file whole (a temporary file renamed over it, both synced): a
    crash leaves the old state or the new one, never half a file."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # owner-only whatever the umask, as every file of a data directory
        replace_file(path, (json.dumps(owner) + "\n").encode("utf-8"), 0o600)
    except OSError as error:
        raise DataDirError(f"{path}: cannot be written ({error.strerror})") from None
