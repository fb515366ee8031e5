"""What a newcomer meets first: the bus file's errors and the docs' transcripts of them.

Each test is a mistake an operator makes on day one (a typo in a table, a file saved
by an editor that adds a byte order mark or another encoding, a value the journal
cannot hold) or a transcript the docs show: the `mrs serve` they run must refuse at
once with one line naming the key (exit 2), or accept what is valid, as the docs say.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from journals import Journal
from mrs.config.bus import load_config, parse_config
from mrs.config.rewrite import with_queue_values
from mrs.group.idempotency import pack_value
from mrs.group.quarantine import quarantine_batch
from mrs.limits import CONFIG_COUNT_MAX, CONFIG_FILE_BYTES_MAX
from mrs.model import Status
from tests.cli_helpers import run_mrs
from tests.journal_helpers import json_lines, record, stopped_bus, write_records

ROOT = Path(__file__).resolve().parents[2]

GROUP = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group.queue]]
id = 10
name = "ORDERS"
"""

SECOND_GROUP = """\
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:0"
data_dir = "g2"
"""


def _serve_refuses(tmp_path: Path, text: str | bytes, *args: str) -> str:
    """`mrs serve` on a bus file of `text`: it must refuse with exit 2 and one line,
    which is returned."""
    path = tmp_path / "bus.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    result = run_mrs("serve", "--config", str(path), "--group", "1", *args, timeout_s=30)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "g1").exists(), "a refused config must not create the data_dir"
    return lines[0]


def test_a_typo_in_the_guards_table_names_the_key_meant(tmp_path) -> None:
    """[group.guards] is the table an operator tunes under pressure: a typo there is
    named with the key it was meant to be, as in every other table."""
    line = _serve_refuses(tmp_path, GROUP + "[group.guards]\nheartbeat_interval = 2.0\n")
    assert "group[0].guards.heartbeat_interval: unknown key" in line
    assert "(did you mean 'heartbeat_interval_s'?)" in line


def test_a_bus_file_saved_with_a_byte_order_mark_loads(tmp_path) -> None:
    """Notepad and some editors start a UTF-8 file with a byte order mark: the file
    is the same bus, not `(syntax): Invalid statement (at line 1, column 1)`; and
    `mrs admin set-limits` still finds its first group to rewrite."""
    text = "\ufeff" + GROUP
    path = tmp_path / "bus.toml"
    path.write_text(text, encoding="utf-8")
    assert load_config(path).groups[1].queues[10].name == "ORDERS"
    changed = with_queue_values(text, 1, 10, {"unconfirmed_max": 5})
    assert parse_config(changed, path).groups[1].queues[10].unconfirmed_max == 5
    assert changed.startswith("\ufeff[[group]]")


def test_a_bus_file_in_another_encoding_names_the_line(tmp_path) -> None:
    """A Latin-1 comment: the one line says which line to fix and how, not a codec's
    byte offset."""
    text = GROUP.replace('name = "NYC"', 'name = "NYC"  # caf\xe9').encode("latin-1")
    line = _serve_refuses(tmp_path, text)
    assert line.endswith(
        "(file): not UTF-8 text: line 3: byte 0xe9 cannot be read as UTF-8 (save the file as UTF-8)"
    ), line


def test_a_dedupe_window_the_journal_cannot_hold_is_refused_at_load(tmp_path) -> None:
    """dedupe_window_s had no upper bound: a long one was taken, and then every put
    with an idempotency key (every recoverable put of a replicated group's clients)
    answered SERVER_ERROR, as its expiry overflowed the 64-bit nanoseconds stored.
    Now it is refused at start, and the longest window allowed still fits."""
    line = _serve_refuses(
        tmp_path, GROUP + "[group.limits]\ndedupe_window_s = 9223372036854775807\n"
    )
    assert "group[0].limits.dedupe_window_s: must be in 1.." in line
    longest = GROUP + f"[group.limits]\ndedupe_window_s = {CONFIG_COUNT_MAX}\n"
    window_s = parse_config(longest, tmp_path / "bus.toml").groups[1].limits.dedupe_window_s
    assert pack_value(1, time.time_ns() + window_s * 1_000_000_000, bytes(16))


def _transcript(page: str, after_heading: str) -> list[tuple[str, str]]:
    """(command, output) pairs of the first console block after `after_heading`."""
    text = (ROOT / "docs" / page).read_text()
    section = text[text.index(after_heading) :]
    block = re.search(r"```console\n(.*?)```", section, re.S)
    assert block is not None
    pairs: list[tuple[str, str]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], ""))
        else:
            command, output = pairs[-1]
            pairs[-1] = (command, (output + "\n" + line).strip())
    return pairs


def test_configuration_md_shows_the_errors_mrs_prints(tmp_path) -> None:
    """configuration.md, "Errors": each transcript line is what `mrs serve` prints,
    for a two-group bus.toml with a typo in a queue, then with the typo fixed (it
    showed another wording of the typo, cut short)."""
    typo = GROUP + 'confrm = "implicit"\n' + SECOND_GROUP
    pairs = _transcript("configuration.md", "## Errors")
    assert len(pairs) == 2
    for bus, (command, output) in zip((typo, GROUP + SECOND_GROUP), pairs, strict=True):
        (tmp_path / "bus.toml").write_text(bus)
        words = command.split("#")[0].split()
        assert words[:2] == ["mrs", "serve"], command
        # the page's relative bus.toml is this one (the last --config given counts)
        result = run_mrs(*words[1:], "--config", str(tmp_path / "bus.toml"), timeout_s=30)
        shown = result.stderr.strip().replace(str(tmp_path / "bus.toml"), "bus.toml")
        assert result.returncode == 2 and shown == output, (command, result.stderr)


def test_demo_refuses_a_scratch_directory_that_is_not_empty(tmp_path) -> None:
    """`mrs demo --scratch DIR` run twice in one directory counted the first run's
    orders with the second's (PCJ 400 for 200 sent) and could report a broken
    guarantee for messages of a run cut short; a file given as DIR was `File
    exists`. Each is one line and exit 2 now, before anything is started or
    written."""
    used = tmp_path / "used"
    used.mkdir()
    (used / "bus.toml").write_text("# a previous run's\n")
    result = run_mrs("demo", "--messages", "10", "--scratch", str(used), timeout_s=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == (
        f"mrs: --scratch {used} is not empty: the demo starts from empty journals; "
        "give a new or empty directory (or none: a temporary one)"
    )
    assert [p.name for p in used.iterdir()] == ["bus.toml"]
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    result = run_mrs("demo", "--messages", "10", "--scratch", str(a_file), timeout_s=60)
    assert result.returncode == 2 and result.stderr.strip().endswith("not a directory")
    assert a_file.read_text() == "mine\n"


def test_a_journaled_dlq_without_a_dlq_is_refused(tmp_path) -> None:
    """`dead_letter_queue = false` with `dead_letter_queue_recoverable = true` was
    taken: the operator believed dead letters survive a SIGKILL, and the group had
    no DLQ at all (the DLQ UMA failed, links went to RETRY). One of the two is a
    mistake, and the line says which keys disagree."""
    flags = "dead_letter_queue = false\ndead_letter_queue_recoverable = true\n"
    line = _serve_refuses(tmp_path, GROUP.replace('data_dir = "g1"\n', f'data_dir = "g1"\n{flags}'))
    assert "group[0].dead_letter_queue_recoverable: true needs a dead letter queue" in line
    assert "dead_letter_queue = false" in line


def test_undeliverable_md_dumps_a_quarantined_record_with_the_fields_it_names(tmp_path) -> None:
    """undeliverable.md's transcript pipes `mrs dump dlj --json` to jq for fields of
    a quarantined record; it named `extra`, which the dump never prints, so the
    operator got null where the page promised the problem. Every field the page's
    jq asks for is in the dump of a record the server's quarantine wrote."""
    [(command, output)] = _transcript("undeliverable.md", "## Poison messages")
    fields = re.search(r"jq -c '\{([^}]*)\}'", command)
    assert fields is not None, command
    bus = stopped_bus(tmp_path / "bus")
    poisoned = record(1)
    quarantine_batch(poisoned, "cannot be delivered: Delivery.priority must be 0..99")
    assert poisoned.reason == Status.BADPARAM
    write_records(bus.data_dir / "journals", Journal.DLJ, [poisoned])
    result = run_mrs("dump", "dlj", "--config", str(bus.config_path), "--group", "1", "--json")
    assert result.returncode == 0, result.stderr
    [dumped] = json_lines(result.stdout)
    shown = {name.strip(): dumped[name.strip()] for name in fields.group(1).split(",")}
    assert shown == {"seq": poisoned.seq, "reason": -1002, "reason_name": "BADPARAM"}
    assert set(shown) == set(json_lines(output)[0])


def test_values_nested_too_deeply_are_a_config_error(tmp_path) -> None:
    """A value of arrays (or inline tables) nested thousands deep, a generated or
    damaged file: tomllib recursed out of stack and `mrs serve` said `unexpected
    error: RecursionError` (exit 1, as if a bug). It is a config error, exit 2."""
    depth = 100_000
    for text in (
        "x = " + "[" * depth + "]" * depth + "\n",
        "x = " + "{a=" * 5000 + "1" + "}" * 5000,
    ):
        line = _serve_refuses(tmp_path, text + "\n" + GROUP)
        assert line.endswith(
            "bus.toml: (syntax): arrays or inline tables nested too deeply to read"
        )


def test_an_endless_config_file_is_refused_not_read_to_the_end(tmp_path) -> None:
    """`mrs serve --config /dev/zero` (a path typed wrong, an endless pipe) read
    until memory ran out. A bus file over CONFIG_FILE_BYTES_MAX is refused, and a
    pipe that ends, as `--config <(...)` gives, is read as before."""
    result = run_mrs("serve", "--config", "/dev/zero", "--group", "1", timeout_s=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"mrs: config error: /dev/zero: (file): larger than "
        f"{CONFIG_FILE_BYTES_MAX >> 20} MiB: not a bus file"
    )
    (tmp_path / "bus.toml").write_text(GROUP)
    with open(tmp_path / "bus.toml", "rb") as file:
        piped = load_config(f"/dev/fd/{file.fileno()}")
    assert piped.groups[1].queues[10].name == "ORDERS"
