"""Prometheus metrics of one group, served on the opt-in `[group.ops] metrics_listen`.

Why these: they answer what an operator asks of a guaranteed-delivery service —
is work flowing (puts, gets, confirms by status; commit latency and batching), is
anything piling up (SAF backlog and drain per link, DQF depth per queue, DLQ and
DLJ), and is it about to stop (journal bytes against the cap). Counters are updated
as replies leave the server (`observe_reply`) and after each commit; gauges are read
from the group's status at scrape time, in the event loop, so they are consistent
with `mrs status`. Every metric is prefixed `mrs_` and labelled by group.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mrs import protocol as wire
from mrs.core.delivery import EMPTY_GET_TEXT
from mrs.limits import STATUS_BUILD_INTERVAL_S
from mrs.model import Status, status_of
from mrs.ops.alarms import ALARM_KINDS
from mrs.ops.http_endpoint import Response, SharedBuild, http_url, serve_endpoint
from mrs.ops.replication_metrics import replication_metrics

if TYPE_CHECKING:
    from mrs.ops.group_ops import GroupOps

log = logging.getLogger("mrs.metrics")

COMMIT_SECONDS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)
MESSAGES_PER_COMMIT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024)


_EMPTY_GET_STATUSES = frozenset({int(Status.TIMEOUT), int(Status.NOMOREMSG)})

PUT_OUTCOMES_AT_START = (
    (Status.SUCCESS, Status.STORED, Status.NO_UMA),
    (Status.SUCCESS, Status.ENQUEUED, Status.NO_UMA),
    (Status.SUCCESS, Status.UNATTACHEDQ, Status.NO_UMA),
    (Status.SUCCESS, Status.SUCCESS, Status.NO_UMA),
    (Status.SUCCESS, Status.SUCCESS, Status.UMA_NA),
)
"""The PSBs of a put that reached its interest point (and of an AK or NN put, answered
at once): their `mrs_puts_total` series exist at 0 from the start, and those an AK
put's MRS_ACK carries in `mrs_acks_total`. Why: `rate()` and `increase()` count
nothing before a series' first sample, so a series born at its first put hid the
burst that made it from every rate panel. The outcomes of a UMA are not made ahead:
causes times UMAs are a hundred series per group, nearly all never seen; the
documented rules count a new series' first value instead (docs/operations.md)."""
LINKED_PUT_OUTCOMES_AT_START = ((Status.SUCCESS, Status.SAF_FORCED, Status.NO_UMA),)
"""Added on a group with links: puts kept in order behind a SAF backlog."""
DELIVERY_STATUSES_AT_START = (Status.CONFIRMREQ, Status.POSSDUPL, Status.SUCCESS)
CONFIRM_STATUSES_AT_START = (Status.SUCCESS,)


def _status_name(value: int) -> str:
    status = status_of(value)
    return getattr(status, "name", str(value))


class GroupMetrics:
    """The registry of one group: live counters plus a collector over its status."""

    def __init__(self, ops: GroupOps) -> None:
        self.ops = ops
        group = str(ops.server.config.id)
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["group"]
        disable_created_metrics()  # a `_created` series per counter only doubles a scrape
        self.puts = Counter(
            "mrs_puts",
            "Puts answered, by status, delivery status (SAF_FORCED, LINK_DOWN, DQF_FULL...) "
            "and what the UMA did (NO_UMA when none ran)",
            [*labels, "status", "delivery_status", "uma_status"],
            registry=self.registry,
        )
        self.deliveries = Counter(
            "mrs_gets",
            "Messages delivered to gets, by delivery status (POSSDUPL: a redelivery)",
            [*labels, "delivery_status"],
            registry=self.registry,
        )
        self.confirms = Counter(
            "mrs_confirms",
            "Confirms answered, by status",
            [*labels, "status"],
            registry=self.registry,
        )
        self.failures = Counter(
            "mrs_request_failures",
            "Requests refused, by status (a get that found no message is not one)",
            [*labels, "status"],
            registry=self.registry,
        )
        self.empty_gets = Counter(
            "mrs_gets_empty",
            "Gets answered with no message (TIMEOUT, NOMOREMSG): an idle consumer",
            [*labels, "status"],
            registry=self.registry,
        )
        self.commit_seconds = Histogram(
            "mrs_commit_seconds",
            "Journal commit latency (fsync included)",
            labels,
            buckets=COMMIT_SECONDS_BUCKETS,
            registry=self.registry,
        ).labels(group)
        self.messages_per_commit = Histogram(
            "mrs_messages_per_commit",
            "Batches (messages) made durable by one commit",
            labels,
            buckets=MESSAGES_PER_COMMIT_BUCKETS,
            registry=self.registry,
        ).labels(group)
        self.group_label = group
        self.registry.register(_StatusCollector(self))
        ProcessCollector(registry=self.registry)  # process_*: RSS, CPU seconds, open fds
        self._put_counters: dict[tuple[int, int, int], Any] = {}
        """PSB (status, delivery status, UMA status) -> its counter: one lookup a put."""
        self._last_commits = 0
        self._last_batches = 0
        self._last_time_s = 0.0
        self._zero_series_at_start(bool(ops.server.config.linked_group_ids))

    def _zero_series_at_start(self, linked: bool) -> None:
        """The counters' series whose labels are known at start, at 0 from the first
        scrape (PUT_OUTCOMES_AT_START says why); links and queues are there already,
        read from the group's status."""
        group = self.group_label
        outcomes = PUT_OUTCOMES_AT_START + (LINKED_PUT_OUTCOMES_AT_START if linked else ())
        for outcome in outcomes:
            key = (int(outcome[0]), int(outcome[1]), int(outcome[2]))
            self._put_counters[key] = self.puts.labels(group, *(s.name for s in outcome))
        for status in DELIVERY_STATUSES_AT_START:
            self.deliveries.labels(group, status.name)
        for status in CONFIRM_STATUSES_AT_START:
            self.confirms.labels(group, status.name)
        for value in sorted(_EMPTY_GET_STATUSES):
            self.empty_gets.labels(group, _status_name(value))

    def observe_reply(self, event: object) -> None:
        """Count one reply leaving the server (cheap: one isinstance chain)."""
        group = self.group_label
        if isinstance(event, wire.PutDone):
            key = (event.status, event.delivery_status, event.uma_status)
            child = self._put_counters.get(key)
            if child is None:  # a PSB seen for the first time: name its three statuses
                child = self.puts.labels(group, *(_status_name(value) for value in key))
                self._put_counters[key] = child
            child.inc()
        elif isinstance(event, wire.Delivery):
            self.deliveries.labels(group, _status_name(event.delivery_status)).inc()
        elif isinstance(event, wire.DeliveryBatch):  # a get_many: each message counts
            for delivery in event.deliveries:
                self.deliveries.labels(group, _status_name(delivery.delivery_status)).inc()
        elif isinstance(event, wire.Confirmed):
            self.confirms.labels(group, _status_name(event.status)).inc()
        elif isinstance(event, wire.Failure):
            if event.status in _EMPTY_GET_STATUSES and event.message.startswith(EMPTY_GET_TEXT):
                self.empty_gets.labels(group, _status_name(event.status)).inc()
            else:
                self.failures.labels(group, _status_name(event.status)).inc()

    def after_commit(self) -> None:
        """Turn the writer's running totals into one histogram sample per commit."""
        group = self.ops.server.group
        if group is None:
            return
        stats = group.writer.stats
        commits = stats.commits - self._last_commits
        if commits <= 0:
            return
        batches = stats.batches - self._last_batches
        seconds = stats.commit_time_s_total - self._last_time_s
        for _ in range(commits):
            self.commit_seconds.observe(seconds / commits)
            self.messages_per_commit.observe(batches / commits)
        self._last_commits = stats.commits
        self._last_batches = stats.batches
        self._last_time_s = stats.commit_time_s_total

    def render(self, _query: str = "") -> Response:
        return Response(200, CONTENT_TYPE_LATEST, generate_latest(self.registry))


class _StatusCollector:
    """Gauges read from the group's status at scrape time."""

    def __init__(self, metrics: GroupMetrics) -> None:
        self.metrics = metrics

    def describe(self):
        return []

    def collect(self):
        server = self.metrics.ops.server
        if server.group is None:
            return
        status = server.status_info()
        group = self.metrics.group_label
        info = InfoMetricFamily("mrs_build", "MRS version of this group's server", labels=["group"])
        info.add_metric(
            [group], {"version": str(status.get("version", "")), "name": status["name"]}
        )
        yield info
        yield _gauge(
            "mrs_uptime_seconds",
            "Seconds since the server started",
            group,
            status.get("uptime_s", 0),
        )
        yield _gauge("mrs_epoch", "Boot epoch", group, status.get("epoch", 0))
        journal = status.get("journal") or {}
        for key, help_text in (
            ("used_bytes", "Journal bytes in use (LMDB pages)"),
            ("map_bytes", "Current LMDB map size"),
            ("cap_bytes", "journal_bytes_max: the map never grows past it"),
        ):
            if key in journal:
                yield _gauge(f"mrs_journal_{key}", help_text, group, journal[key])
        for key, name, help_text in (
            ("disk_free_bytes", "mrs_disk_free_bytes", "Free bytes on the data directory's disk"),
            ("reserve_bytes", "mrs_journal_reserve_bytes", "Journal reserve: new recoverable "
             "messages stop this far from journal_bytes_max, or with less free on the disk"),
        ):  # fmt: skip
            if journal.get(key) is not None:
                yield _gauge(name, help_text, group, journal[key])
        yield _alarm_metric(group, status.get("alarms") or [])
        records = GaugeMetricFamily(
            "mrs_journal_records", "Records per journal", labels=["group", "journal"]
        )
        for name, count in (journal.get("records") or {}).items():
            records.add_metric([group, name], count)
        yield records
        connections = status.get("connections") or {}
        conn = GaugeMetricFamily("mrs_connections", "Open connections", labels=["group", "kind"])
        for kind in ("clients", "links"):
            conn.add_metric([group, kind], connections.get(kind, 0))
        yield conn
        yield _mrs_acks_metric(group, status.get("mrs_acks_sent") or [])
        yield from _link_metrics(group, status.get("links") or {})
        yield from _queue_metrics(group, status.get("queues") or {})
        yield from replication_metrics(group, status.get("replication") or {})


def _mrs_acks_metric(group: str, sent: list[list[int]]) -> CounterMetricFamily:
    """MRS_ACKs made, by the PSB they carry: an AK put's outcome, which its answer
    (UMA_NA) does not say, so `mrs_puts_total` cannot (a discarded AK_MEM put)."""
    family = CounterMetricFamily(
        "mrs_acks",
        "MRS_ACKs made for AK puts, by status, delivery status and what the UMA did "
        "(an AK put's outcome: its put was answered UMA_NA)",
        labels=["group", "status", "delivery_status", "uma_status"],
    )
    counts = {(status, delivery, uma): count for status, delivery, uma, count in sent}
    for outcome in PUT_OUTCOMES_AT_START:  # at 0 until the first (PUT_OUTCOMES_AT_START)
        if outcome[2] is not Status.UMA_NA:  # a put's own answer, never an MRS_ACK's
            counts.setdefault((int(outcome[0]), int(outcome[1]), int(outcome[2])), 0)
    for psb, count in counts.items():
        family.add_metric([group, *(_status_name(value) for value in psb)], count)
    return family


def _gauge(name: str, help_text: str, group: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["group"])
    family.add_metric([group], float(value or 0))
    return family


def _alarm_metric(group: str, alarms: list[dict]) -> GaugeMetricFamily:
    """Alarms raised now per kind (mrs.ops.alarms), every kind always present (0)."""
    family = GaugeMetricFamily(
        "mrs_alarms",
        "Alarms raised now: a bound nearly reached (memory, disk, journal, dqf, saf, dlj; "
        "`mrs status` and the web page say which, in words)",
        labels=["group", "alarm"],
    )
    for kind in ALARM_KINDS:
        family.add_metric([group, kind], sum(1 for alarm in alarms if alarm["alarm"] == kind))
    return family


def _link_metrics(group: str, links: dict):
    labels = ["group", "peer"]
    up = GaugeMetricFamily("mrs_link_up", "1 when the link to the peer is up", labels=labels)
    backlog = GaugeMetricFamily(
        "mrs_saf_backlog", "SAF messages waiting for the peer", labels=labels
    )
    sent = CounterMetricFamily(
        "mrs_link_messages_sent",
        "Messages sent on the link, each once (rate() = drain rate)",
        labels=labels,
    )
    resent = CounterMetricFamily(
        "mrs_link_messages_resent",
        "Messages sent on the link again (RETRY, a restarted drain, after a drop)",
        labels=labels,
    )
    retry = GaugeMetricFamily(
        "mrs_link_drain_retry", "1 while the peer answers RETRY", labels=labels
    )
    in_flight = GaugeMetricFamily("mrs_link_in_flight", "Transfers awaiting an ack", labels=labels)
    for peer, link in links.items():
        key = [group, str(peer)]
        up.add_metric(key, 1.0 if link.get("state") == "up" else 0.0)
        backlog.add_metric(key, link.get("saf_backlog", 0))
        sent.add_metric(key, link.get("messages_sent", 0))
        resent.add_metric(key, link.get("messages_resent", 0))
        retry.add_metric(key, 1.0 if link.get("drain") == "retry" else 0.0)
        in_flight.add_metric(key, link.get("in_flight", 0))
    yield from (up, backlog, sent, resent, retry, in_flight)


def _queue_metrics(group: str, queues: dict):
    labels = ["group", "queue", "name"]
    depth = GaugeMetricFamily("mrs_queue_depth", "Messages waiting in the queue", labels=labels)
    dqf = GaugeMetricFamily("mrs_dqf_depth", "Messages of the queue in its DQF", labels=labels)
    unconfirmed = GaugeMetricFamily(
        "mrs_queue_unconfirmed", "Delivered, not yet confirmed", labels=labels
    )
    for address, queue in queues.items():
        key = [group, address, str(queue.get("name", ""))]
        depth.add_metric(key, queue.get("pending", 0))
        dqf.add_metric(key, queue.get("dqf_depth", 0))
        unconfirmed.add_metric(key, queue.get("unconfirmed", 0))
    yield from (depth, dqf, unconfirmed)


async def serve_metrics(
    ops: GroupOps,
    *,
    listeners: list[trio.SocketListener] | None = None,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve /metrics on the configured address (on `listeners` when the server took
    it before its journals); report when listening (at once on a replicated group's
    active whose port is still taken: mrs.ops.http_endpoint)."""
    config = ops.server.config.ops
    ops.metrics = ops.metrics or GroupMetrics(ops)
    scrape = SharedBuild(ops.metrics.render, STATUS_BUILD_INTERVAL_S)
    routes = {"/metrics": lambda _query: scrape.get()}

    def listening(host: str, port: int) -> None:
        ops.endpoints["metrics"] = f"{http_url(host, port)}metrics"
        log.info("group %d metrics on %s", ops.server.config.id, ops.endpoints["metrics"])

    await serve_endpoint(
        ops.server,
        "metrics_listen",
        config.metrics_host,
        config.metrics_port,
        routes,
        listening,
        listeners=listeners,
        task_status=task_status,
    )
