"""`mrs jplay` tunes the garbage collector for its replay (a tenth of its CPU went
there, issue 17) and leaves a calling process's collector as it found it."""

from __future__ import annotations

import gc
import json

from journals import Journal
from mrs.tools.cli import main
from tests.journal_helpers import record, stopped_bus, write_records


def test_a_replay_in_the_callers_process_leaves_its_collector_as_it_found_it(
    tmp_path, capsys
) -> None:
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(i) for i in range(3)])
    bus.start()
    previous = gc.get_threshold()
    thresholds, frozen = (123, 4, 5), gc.get_freeze_count()
    gc.set_threshold(*thresholds)
    try:
        argv = ["jplay", "--config", str(bus.config_path), "--group", "1"]
        code = main([*argv, "--address", bus.address, "pcj", "--to", "RESTORE", "--json"])
        after = gc.get_threshold(), gc.get_freeze_count()
    finally:
        gc.set_threshold(*previous)
        bus.process.terminate()
    assert code == 0 and json.loads(capsys.readouterr().out)["sent"] == 3
    assert after == (thresholds, frozen)
