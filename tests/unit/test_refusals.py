"""RefusalLog: one line per key per interval, the count of hits not shown, a bounded
key table; the permission gate and the TLS listener throttle their lines with it."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from mrs.core.refusals import RefusalLog
from mrs.security.tls import TlsNetwork


class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _lines(caplog, name: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == name]


def test_one_line_per_key_per_interval_with_the_count_not_shown(caplog) -> None:
    clock = _Clock()
    refusals = RefusalLog(logging.getLogger("t.refusals"), every_s=5.0, clock_s=clock)
    with caplog.at_level(logging.INFO):
        assert refusals.refused("accept", "10.0.0.1", "too many connections")
        for _ in range(7):
            assert not refusals.refused("accept", "10.0.0.1", "too many connections")
        clock.now_s = 4.9
        assert not refusals.refused("accept", "10.0.0.1", "too many connections")
        clock.now_s = 5.0
        assert refusals.refused("accept", "10.0.0.1", "too many connections")
    assert _lines(caplog, "t.refusals") == [
        "10.0.0.1: too many connections",
        "10.0.0.1: too many connections (8 more since the last such line)",
    ]
    assert refusals.total == 10 and refusals.by_limit == {"accept": 10}


def test_the_key_decides_what_one_line_stands_for(caplog) -> None:
    """Keyed on (host, reason): two reasons from one host are each logged at once;
    the same reason from another port of that host is not logged again."""
    refusals = RefusalLog(
        logging.getLogger("t.keyed"),
        every_s=60.0,
        clock_s=_Clock(),
        line_format="[{peer}] {message}",
    )
    with caplog.at_level(logging.INFO):
        refusals.refused("tls", "h:1", "not TLS", key=("h", "not TLS"))
        refusals.refused("tls", "h:2", "not TLS", key=("h", "not TLS"))
        refusals.refused("tls", "h:3", "timed out", key=("h", "timed out"))
        refusals.refused("tls", "g:1", "not TLS", key=("g", "not TLS"))
    assert _lines(caplog, "t.keyed") == ["[h:1] not TLS", "[h:3] timed out", "[g:1] not TLS"]


def test_the_key_table_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr("mrs.core.refusals.REFUSAL_KEYS_MAX", 8)
    refusals = RefusalLog(logging.getLogger("t.bounded"), clock_s=_Clock())
    for peer in range(100):
        refusals.refused("accept", str(peer), "refused")
        assert len(refusals._last) <= 8


def test_tls_refusals_are_logged_per_host_and_reason(caplog) -> None:
    config = SimpleNamespace(server_context=lambda: None, dial_context=lambda: None)
    network = TlsNetwork(config, {})
    with caplog.at_level(logging.INFO, logger="mrs.tls"):
        for port in range(50):  # a flood of one kind from one host: one line
            network._refuse(f"127.0.0.1:{port}", "not a TLS handshake")
        network._refuse("127.0.0.1:99", "a plaintext MRS client (answered: TLS only)")
    assert network.refused == 51
    assert _lines(caplog, "mrs.tls") == [
        "TLS handshake from 127.0.0.1:0 refused: not a TLS handshake",
        "TLS handshake from 127.0.0.1:99 refused: a plaintext MRS client (answered: TLS only)",
    ]


def test_a_burst_that_ends_has_its_count_logged_by_the_flush(caplog) -> None:
    """A burst of 664 wrong passwords in 2 s left one line: the count of the rest
    waited for the key's next hit, which never came. `flush` (every server calls
    `flush_all` each interval) writes it once the interval has passed, once."""
    from mrs.core.refusals import flush_all

    clock = _Clock()
    refusals = RefusalLog(logging.getLogger("t.flush"), every_s=5.0, clock_s=clock)
    with caplog.at_level(logging.INFO):
        for _ in range(664):
            refusals.refused("auth", "10.0.0.9", "wrong password")
        clock.now_s = 4.0
        flush_all()  # too soon: nothing more
        clock.now_s = 5.0
        flush_all()
        clock.now_s = 20.0
        flush_all()  # nothing left to tell
    assert _lines(caplog, "t.flush") == [
        "10.0.0.9: wrong password",
        "10.0.0.9: wrong password (663 more since the last such line)",
    ]
