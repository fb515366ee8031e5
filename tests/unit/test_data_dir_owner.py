"""mrs.storage.data_dir_owner: a data directory records its group at the first start
and refuses another group's server at every later one. (The real `mrs serve
--instance` refusal is tests/process/test_replication.py.)"""

from __future__ import annotations

import json

import pytest

from mrs.storage.data_dir_owner import OWNER_FILE_NAME, claim_data_dir, owner_of
from mrs.storage.datadir import DataDirError

NYC = owner_of(1, "NYC", "/mrs/bus/1")


def test_the_first_start_records_the_group_and_the_same_group_starts_again(tmp_path) -> None:
    data_dir = tmp_path / "new" / "a"  # not there yet
    claim_data_dir(data_dir, NYC, "instance a of group 1")
    assert json.loads((data_dir / OWNER_FILE_NAME).read_text()) == NYC
    renamed = owner_of(1, "NEWYORK", "/mrs/bus/1")  # a rename keeps the journals
    claim_data_dir(data_dir, renamed, "instance b of group 1")
    assert json.loads((data_dir / OWNER_FILE_NAME).read_text()) == NYC
    assert sorted(p.name for p in data_dir.iterdir()) == [OWNER_FILE_NAME]


def test_a_directory_from_before_the_owner_file_is_adopted(tmp_path) -> None:
    (tmp_path / "journals").mkdir()
    (tmp_path / "journals" / "data.mdb").write_bytes(b"old journals")
    claim_data_dir(tmp_path, NYC, "instance a of group 1")
    assert json.loads((tmp_path / OWNER_FILE_NAME).read_text()) == NYC


@pytest.mark.parametrize(
    ("owner", "named"),
    [
        (owner_of(2, "LDN", "/mrs/bus/2"), "not to instance a of group 2 (LDN"),
        (owner_of(1, "NYC", "/mrs/other/1"), "coordinator key /mrs/other/1"),  # another bus
    ],
)
def test_another_groups_server_is_refused_in_one_line(tmp_path, owner, named) -> None:
    claim_data_dir(tmp_path, NYC, "instance a of group 1")
    before = (tmp_path / OWNER_FILE_NAME).read_bytes()
    with pytest.raises(DataDirError) as refused:
        claim_data_dir(tmp_path, owner, f"instance a of group {owner['group_id']}")
    line = str(refused.value)
    assert "\n" not in line and named in line
    assert "belongs to group 1 (NYC, coordinator key /mrs/bus/1)" in line
    assert ("prefix was changed on purpose" in line) == (owner["group_id"] == 1)
    assert (tmp_path / OWNER_FILE_NAME).read_bytes() == before


def test_a_damaged_owner_file_is_refused_not_overwritten(tmp_path) -> None:
    (tmp_path / OWNER_FILE_NAME).write_text("[1, 2")
    with pytest.raises(DataDirError, match="not the JSON object mrs writes"):
        claim_data_dir(tmp_path, NYC, "instance a of group 1")
    assert (tmp_path / OWNER_FILE_NAME).read_text() == "[1, 2"


def test_an_instances_journals_refuse_any_other_server_until_the_entry_is_deleted(
    tmp_path,
) -> None:
    """A directory claimed by a plain group is taken by the instance that starts on
    it; from then on a plain server and another instance are refused in one line
    naming the instance, until the operator deletes the entry as the line says."""
    claim_data_dir(tmp_path, NYC, "group 1")
    as_b = owner_of(1, "NYC", "/mrs/bus/1", "b")
    claim_data_dir(tmp_path, as_b, "instance b of group 1")
    assert json.loads((tmp_path / OWNER_FILE_NAME).read_text()) == as_b
    claim_data_dir(tmp_path, as_b, "instance b of group 1")
    for owner, who in ((NYC, "group 1"), (owner_of(1, "NYC", "/mrs/bus/1", "c"), "instance c")):
        with pytest.raises(DataDirError) as refused:
            claim_data_dir(tmp_path, owner, who)
        line = str(refused.value)
        assert "\n" not in line and "holds the journals of instance b" in line
        assert f"not {who}'s" in line and "mrs serve --instance b" in line
    assert json.loads((tmp_path / OWNER_FILE_NAME).read_text()) == as_b
    (tmp_path / OWNER_FILE_NAME).write_text(json.dumps(NYC))  # deleted on purpose
    claim_data_dir(tmp_path, NYC, "group 1")


def test_two_groups_started_at_once_on_a_new_directory_record_one_owner(tmp_path) -> None:
    """Both servers found no file and both renamed theirs into place: both went on, and
    the file could name the one whose server then lost the journals' lock. Now one
    records the directory and the other is refused, whatever the timing."""
    import threading

    owners = {1: NYC, 2: owner_of(2, "LDN", "/mrs/bus/2")}
    for attempt in range(20):
        data_dir = tmp_path / f"new{attempt}"
        start = threading.Barrier(2)
        claimed: list[int] = []
        refused: list[int] = []

        def start_group(group_id: int, data_dir=data_dir, start=start, claimed=claimed,
                        refused=refused) -> None:  # fmt: skip
            start.wait()
            try:
                claim_data_dir(data_dir, owners[group_id], f"group {group_id}")
            except DataDirError:
                refused.append(group_id)
            else:
                claimed.append(group_id)

        threads = [threading.Thread(target=start_group, args=(g,)) for g in owners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(claimed) == 1 and len(refused) == 1, (claimed, refused)
        recorded = json.loads((data_dir / OWNER_FILE_NAME).read_text())
        assert recorded == owners[claimed[0]]
