"""The bus file a replicated group's next active serves: brought up to the journaled
run-time change when it is only behind, kept when it was edited on its machine since
(mrs.ops.bus_file_record)."""

from __future__ import annotations

import logging
from pathlib import Path

from mrs.config.bus import load_config
from mrs.config.rewrite import with_new_queue, with_queue_values
from mrs.ops.bus_file_record import (
    LINEAGE_MAX,
    BusFileRecord,
    catch_up,
    catch_up_credentials,
    digest,
    next_record,
)

BUS = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "d1"

[[group.queue]]
id = 10
name = "ORDERS"
"""


def _changes() -> tuple[list[str], BusFileRecord]:
    """The texts of two run-time changes (add a queue, then set its limit), and the
    record journaled after the second."""
    texts = [BUS]
    texts.append(with_new_queue(texts[-1], 1, {"id": 30, "name": "RETRY"}))
    texts.append(with_queue_values(texts[-1], 1, 30, {"messages_max": 77}))
    record = None
    for before, after in zip(texts, texts[1:], strict=False):
        record = next_record(record, before, after)
    assert record is not None
    return texts, record


def test_a_file_one_or_two_changes_behind_is_brought_up(tmp_path: Path) -> None:
    texts, record = _changes()
    for behind in texts[:2]:
        path = tmp_path / "bus.toml"
        path.write_text(behind)
        assert catch_up(path, record, 1) == "updated"
        queue = load_config(path).group(1).queue(30)
        assert (queue.name, queue.messages_max) == ("RETRY", 77)
        assert catch_up(path, record, 1) == "same"


def test_a_file_edited_on_its_machine_is_kept_and_says_what_it_lacks(
    tmp_path: Path, caplog
) -> None:
    texts, record = _changes()
    edited = BUS.replace('name = "ORDERS"', 'name = "ORDERS"\nmessages_max = 5')
    path = tmp_path / "bus.toml"
    path.write_text(edited)
    with caplog.at_level(logging.WARNING, logger="mrs.ops"):
        assert catch_up(path, record, 1) == "kept"
    assert path.read_text() == edited
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "edited since" in line and "1.30" in line


def test_no_record_or_no_file_leaves_everything_as_it_is(tmp_path: Path) -> None:
    texts, record = _changes()
    path = tmp_path / "bus.toml"
    path.write_text(BUS)
    assert catch_up(path, None, 1) == "none"
    assert path.read_text() == BUS
    assert catch_up(tmp_path / "absent.toml", record, 1) == "none"


def test_the_record_survives_its_encoding_and_its_lineage_is_bounded() -> None:
    texts, record = _changes()
    assert BusFileRecord.of(record.value()) == record
    assert record.lineage == (digest(texts[0]), digest(texts[1]))
    assert BusFileRecord.of(b"\x01not a record") is None
    long = record
    for index in range(LINEAGE_MAX + 5):
        long = next_record(long, long.text, long.text + f"# {index}\n")
    assert len(long.lineage) == LINEAGE_MAX
    assert digest(texts[0]) not in long.lineage  # the oldest went first


def test_a_kept_file_that_lacks_nothing_is_not_warned_about(tmp_path: Path, caplog) -> None:
    """A file edited otherwise (the group made replicated since, say) that holds every
    queue of the journaled change: kept, said at INFO only."""
    texts, record = _changes()
    path = tmp_path / "bus.toml"
    path.write_text(texts[-1] + "# edited here\n")
    with caplog.at_level(logging.INFO, logger="mrs.ops"):
        assert catch_up(path, record, 1) == "kept"
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_a_credentials_file_behind_the_last_grant_is_brought_up_and_an_edited_one_kept(
    tmp_path: Path, caplog
) -> None:
    """The credentials file the same way (`mrs admin grant` journals its text): one
    grant behind, it takes the grant; edited on its machine since (`mrs creds`), it is
    kept, with one line saying so."""
    before = "[principals.consumer]\nattach = []\n"
    after = '[principals.consumer]\nattach = ["1.10"]\n'
    record = next_record(None, before, after)
    path = tmp_path / "creds.toml"
    path.write_text(before)
    assert catch_up_credentials(path, record) == "updated"
    assert path.read_text() == after
    assert catch_up_credentials(path, record) == "same"
    edited = before + '[principals.local]\nattach = ["1.11"]\n'
    path.write_text(edited)
    with caplog.at_level(logging.WARNING, logger="mrs.ops"):
        assert catch_up_credentials(path, record) == "kept"
    assert path.read_text() == edited
    [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "edited on this machine" in line and "mrs admin journal" in line
