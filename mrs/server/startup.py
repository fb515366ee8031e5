"""Why a group could not start, as one line naming the key or the file to fix.

Why: the failures an operator meets when starting `mrs serve` (a port in use, a host
that is not this machine's, a data_dir that is a file, a journal map too small or too
large to map, read-only journal files, a full disk) used to surface as 50-line trio
exception groups, after the boot epoch had already been committed. Here each becomes
a `CommandError` with exit status 2 when the configuration must change and 1 when the
machine must (free the port, the disk, the permissions). The server binds its
listener and runs these checks before it commits anything, so a failed start leaves
the journals exactly as they were.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import lmdb

from mrs.config.addresses import host_port
from mrs.config.bus import BusConfig, GroupConfig
from mrs.config.instance_types import COORDINATOR_PREFIX_DEFAULT
from mrs.exit_status import EXIT_RUNTIME, EXIT_USAGE, CommandError
from mrs.replication.coordinator import etcd_prefix
from mrs.storage.data_dir_owner import claim_data_dir, owner_of
from mrs.transport.bind_failure import bind_failure

JOURNAL_FILES = ("data.mdb", "lock.mdb")


def _group_key(bus: BusConfig, config: GroupConfig, key: str) -> str:
    """`bus.toml: group 1 (NYC) listen` – where in the file the operator looks."""
    return f"{bus.path}: group {config.id} ({config.name}) {key}"


def check_data_dir(bus: BusConfig, config: GroupConfig) -> None:
    """Refuse a data_dir that is a file, or journal files this process cannot write,
    before anything is opened (LMDB's own errors name neither)."""
    data_dir = Path(config.data_dir)
    _refuse_a_file_in_the_way(_group_key(bus, config, "data_dir"), data_dir)
    journals = data_dir / "journals"
    for name in JOURNAL_FILES:
        path = journals / name
        if not path.exists():
            continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as error:
            raise CommandError(
                f"journal file {path} cannot be opened for writing ({error.strerror}); "
                "make it writable (chmod u+w, chattr -i) or read it with `mrs dump`",
                EXIT_RUNTIME,
            ) from None
        os.close(fd)


def _refuse_a_file_in_the_way(key: str, data_dir: Path) -> None:
    """Refuse a `data_dir` that is a file, or lies under one (`key` names it in the
    config), in one line naming it."""
    for parent in (data_dir, *data_dir.parents):
        if parent.exists() and not parent.is_dir():
            what = f"{parent} is" if parent == data_dir else f"{data_dir} lies under {parent},"
            raise CommandError(
                f"{key}: {what} a file, not a directory; "
                "point data_dir at a directory (it is created if missing)",
                EXIT_USAGE,
            )
        if parent.exists():
            break


def _refuse_an_unwritable_dir(key: str, data_dir: Path) -> None:
    """Make `data_dir` if it is missing, and refuse one this user cannot write, in one
    line naming the key as the file spells it and what to do. Why: the start said only
    "/var/lib/mrs/g1/group.json: cannot be written (Permission denied)", a file the
    operator never named, and no word of data_dir or of the bus file to fix."""
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        problem = f"cannot be created ({error.strerror})"
    else:
        if os.access(data_dir, os.W_OK | os.X_OK, effective_ids=True):
            return
        problem = "cannot be written (permission denied, or a read-only file system)"
    raise CommandError(
        f'{key} = "{data_dir}": {problem}; create it and give it to the user mrs runs '
        f"as ({_user()}), or point data_dir at a directory that user can write",
        EXIT_RUNTIME,
    )


def _user() -> str:
    """This process's user, as `ls -l` names it ("uid 1001" when it has no name)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def claim_group_data_dir(
    bus: BusConfig, config: GroupConfig, data_dir: Path, who: str, instance: str | None = None
) -> None:
    """Refuse `data_dir` if it records another group, or another instance's journals
    (mrs.storage.data_dir_owner), in one line, before anything is opened. The key
    recorded is the group's coordinator key, `<[coordinator] prefix>/<id>`, for an
    unreplicated group as for its instances: a group made replicated later starts an
    instance on its old directory."""
    # first: the claim reads data_dir/group.json, and a data_dir under a file was
    # refused as ".../group.json: cannot be read (Not a directory)"
    key = "data_dir" if instance is None else f"instance {instance} data_dir"
    _refuse_a_file_in_the_way(_group_key(bus, config, key), Path(data_dir))
    _refuse_an_unwritable_dir(_group_key(bus, config, key), Path(data_dir))
    prefix = bus.coordinator.prefix if bus.coordinator is not None else COORDINATOR_PREFIX_DEFAULT
    owner = owner_of(config.id, config.name, etcd_prefix(prefix, config.id), instance)
    claim_data_dir(data_dir, owner, who)


def listen_failure(
    bus: BusConfig, config: GroupConfig, error: OSError, setting: str | None = None
) -> CommandError:
    """The one line for a listener that cannot be bound; `setting` names the address
    in the file ("listen = H:P", the default, or an instance's "replication = H:P")."""
    setting = setting or f"listen = {host_port(config.listen_host, config.listen_port)}"
    key = setting.split(" =", 1)[0].split()[-1]
    return bind_failure(_group_key(bus, config, setting), key, error)


def journal_failure(bus: BusConfig, config: GroupConfig, error: BaseException) -> CommandError:
    """The one line for journals that cannot be opened or take the start-up commit."""
    from journals import JournalDeviceError, JournalFullError

    journals = Path(config.data_dir) / "journals"
    size = config.limits.journal_bytes_max
    size_key = _group_key(bus, config, f"limits.journal_bytes_max = {size}")
    if isinstance(error, MemoryError | lmdb.MemoryError):
        return CommandError(
            f"{size_key}: cannot map a journal that large here (out of address space "
            "or memory limits); lower it",
            EXIT_USAGE,
        )
    if isinstance(error, lmdb.MapFullError | JournalFullError):
        return CommandError(
            f"{size_key}: the journal map is too small to start the group ({journals}); "
            "raise journal_bytes_max",
            EXIT_USAGE,
        )
    if isinstance(error, JournalDeviceError) and error.errno_value == errno.ENOSPC:
        return CommandError(
            f"journal {journals}: no space left on the device; free space, then start again",
            EXIT_RUNTIME,
        )
    if isinstance(error, lmdb.ReadonlyError) or (
        isinstance(error, OSError | lmdb.Error) and _errno_of(error) in (errno.EACCES, errno.EROFS)
    ):
        return CommandError(
            f"journal {journals} is read-only; make it writable or read it with `mrs dump`",
            EXIT_RUNTIME,
        )
    if isinstance(error, lmdb.DiskError) or _errno_of(error) == errno.ENOSPC:
        return CommandError(
            f"journal {journals}: no space left on the device; free space, then start again",
            EXIT_RUNTIME,
        )
    detail = " ".join(str(error).split())
    return CommandError(f"journal {journals} cannot be opened: {detail}", EXIT_RUNTIME)


def _errno_of(error: BaseException) -> int | None:
    code = getattr(error, "errno", None) or getattr(error, "errno_value", None)
    if isinstance(code, int):
        return code
    text = str(error)
    for name in ("EACCES", "EROFS", "ENOSPC"):
        if os.strerror(getattr(errno, name)) in text:
            return getattr(errno, name)
    return None
