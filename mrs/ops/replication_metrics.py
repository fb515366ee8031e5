"""Prometheus gauges of a replicated group, read from the active's status at scrape
time (its `replication` part, mrs.replication.active): the term, and per replica
whether it is in sync, whether its link is up, and its backlog of records and bytes
not yet acknowledged. An unreplicated group yields none."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily


def replication_metrics(group: str, replication: dict) -> Iterator[GaugeMetricFamily]:
    if not replication:
        return
    term = GaugeMetricFamily("mrs_replication_term", "The active's term", labels=["group"])
    term.add_metric([group], float(replication.get("term", 0)))
    labels = ["group", "instance"]
    in_sync = GaugeMetricFamily(
        "mrs_replication_in_sync", "1 when etcd records the replica as in sync", labels=labels
    )
    connected = GaugeMetricFamily(
        "mrs_replication_link_up", "1 while the active streams to the replica", labels=labels
    )
    records = GaugeMetricFamily(
        "mrs_replication_backlog_records", "Commits not acknowledged by the replica", labels=labels
    )
    size = GaugeMetricFamily(
        "mrs_replication_backlog_bytes", "Bytes of commits not acknowledged", labels=labels
    )
    for name, replica in (replication.get("replicas") or {}).items():
        key = [group, str(name)]
        in_sync.add_metric(key, 1.0 if replica.get("in_sync") else 0.0)
        connected.add_metric(key, 1.0 if replica.get("connected") else 0.0)
        records.add_metric(key, float(replica.get("backlog_records", 0)))
        size.add_metric(key, float(replica.get("backlog_bytes", 0)))
    yield from (term, in_sync, connected, records, size)
