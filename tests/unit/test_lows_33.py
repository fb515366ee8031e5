"""What the bus file took and should not (session 33): each is refused in one line
naming the file and the key, before a group starts.

- `data_dir = "/"` (or a system directory, the home directory, a path under /proc
  or /sys): the group wrote `journals/`, `group.json` and its lock there.
- `pcj_archive_dir = "/"` (or "/etc"): every archive run wrote its files there.
- `pcj_archive_after_s` past any sensible age (9223372036854775807): every automatic
  archive run asked for a time before the epoch and archived nothing, unsaid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.config.bus import ConfigError, parse_config

GROUP = '[[group]]\nid = 1\nname = "G1"\nlisten = "127.0.0.1:7001"\ndata_dir = "{data_dir}"\n'
INSTANCES = "".join(
    f'[[group.instance]]\nname = "{n}"\nlisten = "127.0.0.1:710{i}"\n'
    f'replication = "127.0.0.1:720{i}"\ndata_dir = "{n}"\n'
    for i, n in enumerate("bc", start=1)
)
INSTANCE = (
    '[coordinator]\netcd = ["http://127.0.0.1:2379"]\n[[group]]\nid = 1\nname = "G1"\n'
    '[[group.instance]]\nname = "a"\nlisten = "127.0.0.1:7100"\n'
    'replication = "127.0.0.1:7200"\ndata_dir = "{data_dir}"\n' + INSTANCES
)
"""A replicated group whose first instance's data_dir is the one tried."""


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, tmp_path / "bus.toml")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'bus.toml'}: "), message
    return message


@pytest.mark.parametrize(
    ("data_dir", "said"),
    [
        ("/", "/ is a directory of the system"),
        ("/etc", "/etc is a directory of the system"),
        ("/var/lib", "e.g. /var/lib/mrs"),
        ("/proc/mrs", "/proc/mrs is under /proc, the kernel's view, not a disk"),
    ],
)
@pytest.mark.parametrize(
    ("template", "key"), [(GROUP, "group[0]"), (INSTANCE, "group[0].instance[0]")]
)
def test_a_system_directory_is_no_data_dir(
    tmp_path: Path, template: str, key: str, data_dir: str, said: str
) -> None:
    message = _refused(tmp_path, template.format(data_dir=data_dir))
    assert f"{key}.data_dir: " in message and said in message, message


def test_the_home_directory_is_no_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    message = _refused(tmp_path, GROUP.format(data_dir="~"))
    assert f"group[0].data_dir: {home} is the home directory" in message, message
    parse_config(GROUP.format(data_dir="~/mrs-g1"), tmp_path / "bus.toml")  # under it: taken


def test_a_system_directory_is_no_pcj_archive_dir(tmp_path: Path) -> None:
    text = GROUP.format(data_dir="g1") + '[group.ops]\npcj_archive_dir = "/"\n'
    message = _refused(tmp_path, text)
    assert "group[0].ops.pcj_archive_dir: / is a directory of the system" in message, message


@pytest.mark.parametrize("after_s", [315_360_001, 9223372036854775807])
def test_pcj_archive_after_s_is_bounded_as_its_neighbours_are(tmp_path: Path, after_s: int) -> None:
    text = GROUP.format(data_dir="g1") + f"[group.ops]\npcj_archive_after_s = {after_s}\n"
    message = _refused(tmp_path, text)
    assert f"group[0].ops.pcj_archive_after_s: must be in 0..315360000, got {after_s}" in message
    ten_years = GROUP.format(data_dir="g1") + "[group.ops]\npcj_archive_after_s = 315360000\n"
    assert parse_config(ten_years, tmp_path / "bus.toml").group(1).ops.pcj_archive_after_s


def test_a_piped_bus_files_relative_paths_start_at_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mrs serve --config <(envsubst < bus.toml)`: the file is a pipe at /dev/fd/N,
    whose directory is /proc/PID/fd; `data_dir = "g1"` resolved there (no directory
    can be made there), and is now refused as the kernel's view. It starts at the
    working directory instead, as the shell's own paths do."""
    from mrs.config.bus import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bus.toml").write_text(GROUP.format(data_dir="g1"))
    with open(tmp_path / "bus.toml", "rb") as file:
        piped = load_config(f"/dev/fd/{file.fileno()}")
    assert piped.groups[1].data_dir == tmp_path / "g1"
