"""Links to a replicated group across its failovers, as real processes: etcd, three
`mrs serve --instance` processes, a plain `mrs serve` group linked to them, fault
proxies on the replication links.

What a linked group depends on: whichever instance is active, the replicated group is
one peer. Its journals' incarnation (mrs.group.incarnation) is the same after any
failover, so the link is never refused as "other journals"; and the seqs its
messages carry across the link are never given to other messages by the next
active, so the peer's (origin group, seq) memory never drops a new message for an
old one's resend.
"""

from __future__ import annotations

import collections
import re
import struct
import time
from pathlib import Path

import trio

from clients import DeliveryMode, MrsError, Status, Uma, connect, instance_addresses
from journals import Journal, JournalStore, WriteBatch
from mrs.core.seqspace import RESERVED_KEY, SeqAllocator, counter_of
from mrs.errors import Refused
from mrs.group.incarnation import INCARNATION_KEY
from mrs.replication.stream import CommitStream, RecordingStore
from sim.etcd import wait_active
from sim.ports import free_port
from sim.processes import GroupProcess
from sim.replicated_nemesis import ReplicatedBus
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import wait_caught_up

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 60.0


async def _link(address: str, peer: int) -> dict:
    async with connect(address, None) as client:
        return (await client.status())["links"][str(peer)]


async def _wait_link_up(address: str, peer: int, backlog: int | None = None) -> None:
    """Poll a group's status until its link to `peer` is up (another process's state:
    no event to await)."""
    with trio.fail_after(WAIT_S):
        while True:
            link = await _link(address, peer)
            if link["state"] == "up" and backlog in (None, link["saf_backlog"]):
                return
            await trio.sleep(0.1)


def _logged_by_any(paths: dict[str, Path], pattern: str, after: dict[str, int]) -> str:
    """The first of `paths` whose log has a line matching `pattern` after byte
    `after[name]`: a log line is the only trace of the moment the test acts on (a
    term won), so the logs are polled every 5 ms."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for name, path in paths.items():
            if re.search(pattern, path.read_text(errors="replace")[after[name] :]):
                return name
        time.sleep(0.005)
    raise AssertionError(f"no {pattern!r} in {sorted(paths)}")


def _forget_incarnation(data_dir: Path) -> None:
    """Journals as an older release left them: no incarnation in META."""
    store = JournalStore(data_dir / "journals")
    try:
        assert store.meta_get(INCARNATION_KEY) is not None
        store.commit_now(WriteBatch.empty().delete(Journal.META, INCARNATION_KEY.encode()))
    finally:
        store.close()


def _linked_config(etcd_endpoint: str, directory: Path) -> Path:
    """Plain group 1 (NYC, port chosen at start) linked to replicated group 2 (LDN:
    instances a, b, c); its own coordinator prefix (the directory's name)."""
    config = write_replicated_config(directory, etcd_endpoint, STANDARD_QUEUES)
    text = config.read_text().replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"')
    plain = '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
    config.write_text(text + plain + STANDARD_QUEUES + "[[link]]\ngroups = [1, 2]\n")
    return config


def test_a_failover_before_the_replicas_hold_the_incarnation_keeps_the_link(etcd, tmp_path) -> None:
    """Group 2's journals predate the incarnation; the first active after the upgrade
    writes one, and its replica is paused before it has that record. Before, group
    1's link came up at once and recorded it; the active was then lost, the replica
    took over, wrote another, and group 1 refused it for ever ("group 2's journals
    (incarnation ...) are not the ones group 1 linked with before": a reset-link would
    have deleted the dedupe keys of the same journals). Now no link is adopted before
    the incarnation is on a majority: after the failover the link comes up with the
    new active and group 1's SAF message arrives."""
    config = _linked_config(etcd.endpoint, tmp_path)
    instances = {name: InstanceProcess(config, name, group_id=2) for name in "abc"}
    nyc = GroupProcess(config, 1)
    try:
        for process in instances.values():
            process.start()
        old = wait_active(instances, 30)
        trio.run(_wait_in_sync, instance_addresses(config, "LDN"))
        for process in instances.values():
            process.terminate()
        for name in "abc":
            _forget_incarnation(tmp_path / name)
        nyc_address = nyc.start()
        rest = {name: p for name, p in instances.items() if name != old}
        logs = {name: tmp_path / f"{name}.log" for name in rest}
        sizes = {name: path.stat().st_size for name, path in logs.items()}
        for process in rest.values():
            process.start()
        winner = _logged_by_any(logs, r"won term", sizes)
        (paused,) = set(rest) - {winner}
        rest[paused].pause()  # before the winner's first records reach it
        nyc_log = tmp_path / "group1.log"
        _logged_by_any({"1": nyc_log}, r"link to group 2 up|group 2 is starting", {"1": 0})
        rest[winner].kill()
        rest[paused].resume()
        instances[old].start()  # a replica for the next active: it answers nothing alone
        assert wait_active({paused: rest[paused]}, 30) == paused
        trio.run(_put_and_receive, nyc_address, instance_addresses(config, "LDN"))
        assert "are not the ones group 1 linked with" not in nyc_log.read_text()
    finally:
        nyc.terminate()
        for process in instances.values():
            process.resume()
            process.terminate()


async def _wait_in_sync(addresses: list[str]) -> None:
    async with connect(addresses, "ORDERS") as client:
        await wait_caught_up(client, {"a", "b", "c"})


async def _put_and_receive(nyc_address: str, ldn_addresses: list[str]) -> None:
    """A WF_SAF put in group 1 reaches group 2's new active over the link."""
    async with connect(nyc_address, "SENDER") as sender:
        psb = await sender.put(b"after", "2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
    await _wait_link_up(nyc_address, 2, backlog=0)
    async with connect(ldn_addresses, "ORDERS") as receiver:
        message = await receiver.get(timeout=30)
        assert message.body == b"after"
        await receiver.confirm(message.seq)


class _LinkedReplicatedBus(ReplicatedBus):
    """sim's ReplicatedBus (group 1: a, b, c, a fault proxy on each replication link)
    linked to a plain group 2 that listens on `peer_port`."""

    def __init__(self, directory: Path) -> None:
        self.peer_port = free_port()
        super().__init__(directory)
        self.peer = GroupProcess(self.instances["a"].config_path, 2)

    def _config(self, own: str) -> Path:
        path = super()._config(own)
        peer = (
            f'[[group]]\nid = 2\nname = "LDN"\nlisten = "127.0.0.1:{self.peer_port}"\n'
            f'data_dir = "g2"\n{STANDARD_QUEUES}[[link]]\ngroups = [1, 2]\n'
        )
        path.write_text(path.read_text() + peer)
        return path

    def cut_replication(self, name: str) -> None:
        """`name` cut off from the other instances (not from etcd: it stays active)."""
        for (dialer, target), proxy in self.replication_proxies.items():
            if name in (dialer, target):
                proxy.cut()


async def _put_all(addresses: list[str], prefix: bytes, count: int, uma: Uma) -> dict:
    """`count` WF_DQF puts from group 1 to 2.10, 32 at a time: body -> (PSB status,
    seq counter); a put not answered within 10 s counts as not acknowledged."""
    answers: dict[bytes, tuple[Status, int]] = {}
    async with connect(addresses, "P0") as client:

        async def put(body: bytes) -> None:
            with trio.move_on_after(10):
                try:
                    psb = await client.put(body, "2.10", delivery=DeliveryMode.WF_DQF, uma=uma)
                except MrsError:
                    return
                answers[body] = (psb.status, counter_of(psb.seq))

        for start in range(0, count, 32):
            async with trio.open_nursery() as nursery:
                for index in range(start, min(start + 32, count)):
                    nursery.start_soon(put, b"%s-%d" % (prefix, index))
    return answers


async def _take_all(address: str) -> list[bytes]:
    bodies = []
    async with connect(address, "ORDERS") as client:
        while True:
            try:
                message = await client.get(timeout=3)
            except MrsError:
                return bodies
            bodies.append(message.body)
            await client.confirm(message.seq)


async def test_a_new_active_never_gives_a_lost_actives_seqs_to_other_messages(
    tmp_path,
) -> None:
    """Group 1's active is cut off from its replicas (it keeps its lease) and goes on
    sending puts to group 2 over their link; it needs a new block of seqs, which its
    replicas never get; it is SIGKILLed and a replica takes over. Before, the new
    active counted from the block its journals held and gave the lost active's seqs
    to new messages: group 2 took them for the old ones (176 of 200 acknowledged
    messages lost, the new ones delivered twice, unmarked). Now every message
    answered STORED arrives exactly once."""
    bus = _LinkedReplicatedBus(tmp_path)
    await trio.to_thread.run_sync(bus.etcd.start)
    try:
        async with trio.open_nursery() as nursery:
            await bus.run_proxies(nursery)
            bus.start_missing()
            first = await trio.to_thread.run_sync(wait_active, bus.instances, 30)
            peer = await trio.to_thread.run_sync(bus.peer.start)
            await _wait_link_up(peer, 1)
            answered = await _put_all(bus.addresses, b"warm", 1000, Uma.DISC)
            async with connect(bus.addresses, "ORDERS") as client:
                await wait_caught_up(client, set(bus.instances))
            bus.cut_replication(first)
            answered |= await _put_all(bus.addresses, b"cut", 200, Uma.DISC)
            assert max(seq for _, seq in answered.values()) > 1024  # a new block
            await trio.to_thread.run_sync(bus.instances[first].kill)
            bus.heal()
            others = {name: p for name, p in bus.instances.items() if name != first}
            await trio.to_thread.run_sync(wait_active, others, 30)
            await _wait_link_up(peer, 1)
            answered |= await _put_all(bus.addresses, b"next", 200, Uma.SAF)
            delivered = collections.Counter(await _take_all(peer))
            nursery.cancel_scope.cancel()
    finally:
        bus.peer.terminate()
        bus.stop()
    acknowledged = {body for body, (status, _) in answered.items() if status == Status.SUCCESS}
    assert len(acknowledged) == 1400, collections.Counter(s for s, _ in answered.values())
    assert acknowledged - set(delivered) == set()  # none lost
    assert [body for body, count in delivered.items() if count > 1] == []


async def test_an_active_whose_replicas_acknowledge_nothing_hands_out_no_seq_they_miss(
    tmp_path,
) -> None:
    """The seq allocator of an active (its LMDB journals, its commit stream) that no
    replica answers: it hands out seqs below what its term's first reservation (the
    record its links wait for) reaches, then refuses JOURNAL_FAIL, and goes on once a
    replica has acknowledged its records. Before, it reserved block after block on
    its own disk and handed them all out: after its loss the next active counted
    from the first record again, under seqs peers had already seen."""
    store = JournalStore(tmp_path / "journals")
    try:
        stream = CommitStream(1, ("b", "c"), lambda dones: None)
        seqs = SeqAllocator(RecordingStore(store, stream), 1)
        seqs.start()
        (first_reserved,) = struct.unpack(">Q", store.meta_get(RESERVED_KEY.decode()))
        handed = 0
        try:
            for _ in range(4 * first_reserved + (1 << 22)):
                handed = counter_of(seqs.next())
        except Refused as refused:
            assert refused.status == Status.JOURNAL_FAIL
            assert "not on a majority" in str(refused)
        assert 1024 < handed < first_reserved
        stream.in_sync.add("b")
        stream.ack("b", stream.number)  # a replica holds every record now
        assert counter_of(seqs.next()) == handed + 1
    finally:
        store.close()
