"""Defects carried from earlier sessions' notes, fixed in the twenty-third session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clients import DeliveryMode
from tests.conftest import STANDARD_QUEUES


def test_journals_copied_from_another_group_are_refused_in_one_line(tmp_path: Path) -> None:
    """`rm -r g1/journals && cp -r g2/journals g1/` kept group 1's group.json, and
    group 1 served group 2's stored messages on its own queues, as first deliveries.
    Now its server refuses them in one line, and its own journals start as before."""
    import shutil

    from clients import connect_sync
    from sim.processes import GroupProcess, write_single_group_config

    configs = {}
    for group_id in (1, 2):
        path = write_single_group_config(tmp_path / f"bus{group_id}", queues=STANDARD_QUEUES)
        path.write_text(path.read_text().replace("id = 1\n", f"id = {group_id}\n", 1))
        configs[group_id] = path
        server = GroupProcess(path, group_id)
        server.start()
        with connect_sync(server.address, "SENDER") as client:
            client.put(b"of group %d" % group_id, f"{group_id}.10", delivery=DeliveryMode.WF_DQF)
        server.terminate()
    g1 = tmp_path / "bus1" / "g1"
    shutil.move(g1 / "journals", tmp_path / "g1-journals")
    shutil.copytree(tmp_path / "bus2" / "g1" / "journals", g1 / "journals")
    refused = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(configs[1]), "--group", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds the journals of group 2, not of group 1" in lines[0], lines
    shutil.rmtree(g1 / "journals")
    shutil.move(tmp_path / "g1-journals", g1 / "journals")  # its own back: it serves
    server = GroupProcess(configs[1], 1)
    server.start()
    with connect_sync(server.address, "1.10") as reader:
        assert reader.get(timeout=10).body == b"of group 1"
    server.terminate()


def test_a_swarm_given_seed_and_a_range_refuses_both_in_one_line() -> None:
    """`mrs sim swarm --seed 3 --seeds 500` replayed seed 3 alone and said nothing of
    the 500 seeds the tester asked for; `--first` was ignored the same way."""
    from tests.cli_helpers import run_mrs

    for extra in (["--seeds", "500"], ["--first", "7"]):
        result = run_mrs("sim", "swarm", "--seed", "3", *extra, timeout_s=30)
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.startswith("mrs: ") and extra[0] in result.stderr
        assert "give one or the other" in result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_bench_latencies_are_of_stored_puts_only(tmp_path: Path, monkeypatch) -> None:
    """`mrs bench`'s p50/p99 counted the quick answers of refused puts (a full queue's
    UMA, answered without a commit) with the stored ones', so a bench whose puts were
    mostly refused showed a latency better than any put had. Now a row times only the
    puts it counts: one latency per stored put, WF and AK alike."""
    from mrs.tools.bench import servers
    from mrs.tools.bench.runner import measure_server

    monkeypatch.setattr(servers, "DQF_MESSAGES_MAX", 40)  # nearly every put refused
    for ak in (False, True):
        result = measure_server(tmp_path / f"ak{ak}", 1, 8, 0.5, 64, ak=ak)
        assert result.failures > 0 and 0 < result.count <= 40, (ak, result.count)
        assert len(result.latencies_s) <= result.count + 8, (ak, len(result.latencies_s))


def test_admin_grant_without_a_right_is_refused_before_the_server_is_asked() -> None:
    """`mrs admin grant owner --config ...` (the rights forgotten) replaced the
    principal's grants with none, the operator's own included: locked out at 3 a.m.
    Now it needs `--none` to mean that, and is refused in one line otherwise (the
    address is never dialed: nothing listens there)."""
    from tests.cli_helpers import run_mrs

    result = run_mrs("admin", "grant", "owner", "--address", "127.0.0.1:9", timeout_s=30)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no right given" in result.stderr and "--none" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    both = run_mrs("admin", "grant", "owner", "--none", "--put", "1.*", "--address", "127.0.0.1:9")
    assert both.returncode == 2 and "--none with rights given" in both.stderr


def test_a_groups_link_credential_takes_no_grants(tmp_path: Path) -> None:
    """`mrs creds grant group:2 --attach '*'` (and the same through `mrs admin grant`
    and the web page, which share `mrs.security.creds.grant`) gave application rights
    to a link credential: whoever held group 2's link secret could attach and get
    as an application. Refused in one line; the file is left as it was."""
    from tests.cli_helpers import run_mrs

    creds = tmp_path / "creds.toml"
    assert run_mrs("creds", "add-group", "2", "--file", str(creds), "--secrets",
                   str(tmp_path)).returncode == 0  # fmt: skip
    before = creds.read_bytes()
    result = run_mrs("creds", "grant", "group:2", "--file", str(creds), "--attach", "*")
    assert result.returncode != 0, result.stdout + result.stderr
    assert "link credential" in result.stderr and len(result.stderr.splitlines()) == 1
    assert creds.read_bytes() == before


def _group_certificate_ending_in(config: Path, days: float) -> None:
    """Replace group 1's certificate (made by `mrs certs --apply`) by one of the same
    CA and names whose validity ends `days` from now."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from mrs.config.bus import load_config
    from mrs.tools import certs as certs_tool

    out = config.parent / "certs"
    ca_cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
    began = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
        days=certs_tool.VALID_DAYS - days
    )
    names = certs_tool._group_names(load_config(config).group(1))
    certs_tool._leaf(out, "group-1", names, ca_cert, ca_key, began)  # type: ignore[arg-type]


def test_a_certificate_that_expires_soon_is_a_warning_of_the_running_group(
    tmp_path: Path,
) -> None:
    """A certificate that expired while the group ran made every new handshake fail
    with INFO lines only, and nothing warned before the day. Now `mrs serve` logs a
    WARNING naming the file and the day from CERT_EXPIRY_WARN_S before (and every
    CERT_EXPIRY_CHECK_S), an ERROR once it has expired; none for a fresh one."""
    import logging

    from mrs.config.bus import load_config
    from sim.processes import write_single_group_config
    from tests.cli_helpers import run_mrs

    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    made = run_mrs("certs", "--config", str(config), "--out", str(config.parent / "certs"),
                   "--apply")  # fmt: skip
    assert made.returncode == 0, made.stderr
    tls = load_config(config).group(1).tls
    assert tls is not None and tls.expiry_notice() is None
    _group_certificate_ending_in(config, 3)
    level, line = tls.expiry_notice() or (0, "")
    assert level == logging.WARNING and "group-1.pem expires on" in line and "in 3 days" in line
    _group_certificate_ending_in(config, 1)
    server = subprocess.Popen(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        for said in server.stderr:  # the warning comes before READY
            assert "READY" not in said, "no warning before the group was ready"
            if "expires on" in said:
                assert "WARNING" in said and "group-1.pem" in said and "mrs certs" in said
                break
    finally:
        server.kill()
        server.wait()


def test_an_admin_number_the_wire_cannot_carry_is_a_usage_error() -> None:
    """`mrs admin set-limits Q --messages-max 99999999999999999999` was refused by the
    frame encoder in its own words ("AdminRequest.args holds an int out of msgpack
    range"); now argparse's one line, exit 2, before anything is dialed."""
    from tests.cli_helpers import run_mrs

    huge = str(10**20)
    for argv, said in (
        (("set-limits", "ORDERS", "--messages-max", huge), "below 2**63"),
        (("browse", "ORDERS", "--limit", huge), "1..1000"),  # its own range, checked first
    ):
        result = run_mrs("admin", *argv, "--address", "127.0.0.1:9", timeout_s=30)
        assert result.returncode == 2, result.stdout + result.stderr
        assert said in result.stderr and "msgpack" not in result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_a_missing_credentials_file_is_a_config_error_exit_2(tmp_path: Path) -> None:
    """configuration.md: every config mistake is one line and exit status 2. `[auth]`
    naming a credentials file that is not there ended `mrs serve` with status 1."""
    from tests.auth_helpers import SecureBus

    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    assert bus.config_path is not None
    (bus.config_path.parent / "creds.toml").unlink()
    served = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(bus.config_path), "--group", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert served.returncode == 2, served.stderr
    assert len(served.stderr.splitlines()) == 1 and "creds.toml" in served.stderr


async def test_a_call_retried_in_a_loop_while_the_server_is_down_lets_trio_run(
    tmp_path: Path,
) -> None:
    """With the server gone, `put` (and put_many, confirm_many, locate, pending, a
    selective get) raised LINK_DOWN/NOTACTIVE without a checkpoint, so the ordinary
    loop `except MrsError: continue` never yielded: the client's own reconnect never
    ran, a cancel scope never fired, the rest of the program stood still (200,000
    tries and a 10 ms ticker never ticked). Now each refusal is a checkpoint."""
    import trio

    from clients import MrsError, connect
    from mrs.core.selection import by_class_type
    from tests.client_helpers import FAST_RECONNECT, FixedPortServer

    server = FixedPortServer(tmp_path / "bus")
    server.start()
    calls = {
        "put": lambda client: client.put(b"x", "ORDERS"),
        "put_many": lambda client: client.put_many([(b"x", "ORDERS")]),
        "confirm_many": lambda client: client.confirm_many([1]),
        "locate": lambda client: client.locate("ORDERS"),
        "pending": lambda client: client.pending(["ORDERS"]),
        "selective get": lambda client: client.get(timeout=0, select=by_class_type(1)),
    }
    try:
        async with connect(server.address, "SENDER", reconnect=FAST_RECONNECT) as client:
            server.kill()
            for name, call in calls.items():
                ticks = 0

                async def ticker() -> None:
                    nonlocal ticks
                    while True:
                        await trio.sleep(0.01)
                        ticks += 1

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ticker)
                    for _ in range(20_000):  # a bound, so the old code ends too
                        try:
                            await call(client)
                        except MrsError:
                            continue
                        if ticks > 3:
                            break
                        await trio.sleep(0)
                    nursery.cancel_scope.cancel()
                assert ticks > 3, f"{name}: the program stood still while it was refused"
    finally:
        server.stop()


async def test_a_slow_commit_is_a_warning_in_the_groups_log(make_bus, tmp_path: Path) -> None:
    """With the default writer every answer waits for the commit: a disk that stalled
    18 s left nothing in the group's log while its clients said "server silent for
    15 s". Now a commit over SLOW_COMMIT_S is a WARNING naming how long it took."""
    fault = tmp_path / "fault"
    fault.write_text("")
    bus = make_bus(env={"MRS_FAULT_FILE": str(fault)})
    async with bus.connect(queue="SENDER") as sender:
        await sender.put(b"quick", "ORDERS", delivery=DeliveryMode.WF_DQF)
        assert "journal commit took" not in bus.log_text()
        fault.write_text("SLOW 1.5")
        await sender.put(b"late", "ORDERS", delivery=DeliveryMode.WF_DQF)
        fault.write_text("")
        await sender.put(b"after", "ORDERS", delivery=DeliveryMode.WF_DQF)
    lines = [line for line in bus.log_text().splitlines() if "journal commit took" in line]
    assert len(lines) == 1 and "WARNING" in lines[0] and "took 1." in lines[0], lines


def test_a_drain_waiting_for_room_names_no_message_once_its_stuck_one_is_stored(
    tmp_path: Path,
) -> None:
    """`mrs status`'s drain wait named the first message the full DQF refused for as
    long as the drain waited for room, after that message was long delivered (an
    operator looked it up in the SAF and did not find it). Once it is stored the wait
    names no message; the status (DQF_FULL) stays while the drain waits."""
    from mrs import protocol as wire
    from mrs.model import Uma
    from tests.process.test_group_rooms import LinkPair, put

    pair = LinkPair(tmp_path)  # group 1's DQF holds 5
    try:
        back = pair.nodes[2].session("OUT")
        for index in range(1, 9):
            pair.nodes[2].group.put(
                back, put("1.10", b"r", DeliveryMode.WF_DQF, Uma.SAF, request_id=index)
            )
        pair.nodes[2].commit()
        pair.connect()
        pair.run()
        wait = pair.links[2].status_info()["drain_wait"]
        assert wait["status"] == "DQF_FULL" and wait["stuck_seq"] is not None
        stuck = wait["stuck_seq"]
        receiver = pair.nodes[1].session("IN")
        for request_id in (1, 3):  # two confirmed: room for the stuck one and one more
            pair.nodes[1].group.get(receiver, wire.Get(request_id=request_id, timeout_ms=0))
            pair.nodes[1].commit()
            seq = [e for e in receiver.events if isinstance(e, wire.Delivery)][-1].seq
            confirm = wire.Confirm(request_id=request_id + 1, seq=seq, confirm_value=0, force_j=0)
            pair.nodes[1].group.confirm(receiver, confirm)
            pair.run()
        from journals import Journal
        from journals.keys import group_key

        assert pair.nodes[2].store.get_raw(Journal.SAF, group_key(1, stuck)) is None  # sent
        wait = pair.links[2].status_info()["drain_wait"]
        assert wait["status"] == "DQF_FULL" and wait["stuck_seq"] is None, wait
    finally:
        pair.close()
