"""`mrs demo` runs end to end and reports that no acknowledged message was lost."""

import subprocess
import sys


def test_demo_shows_nothing_acknowledged_was_lost(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "demo", "--messages", "400", "--scratch", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Every order acknowledged as stored was delivered, in order." in result.stdout
    assert "SIGKILL" in result.stdout and "Link healed" in result.stdout
