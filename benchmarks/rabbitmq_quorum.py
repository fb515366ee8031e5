"""The shapes of benchmarks/replication.py against a RabbitMQ quorum queue (issue 51).

    benchmarks/rabbitmq_cluster.sh start
    .venv/bin/python benchmarks/rabbitmq_quorum.py --seconds 3 --tasks 32
    benchmarks/rabbitmq_cluster.sh stop

Why: issue 51 asks for MRS's replicated group beside a three-node RabbitMQ quorum queue
started on this machine, shape for shape. Each shape declares a fresh durable queue
with `x-queue-type = quorum` and `x-quorum-initial-group-size = 3` (one member on each
node: every publish is fsynced on a majority before it is confirmed) through node 1,
whose client-local leader locator makes node 1 the leader, and deletes it afterwards.
Persistent messages (delivery_mode 2), 256-byte bodies like the MRS shapes, the
default exchange, pika 1.x's SelectConnection (its callback API, the fastest pika
client for confirms), one connection per shape:

- confirms: one publisher with `tasks` messages unconfirmed at most (MRS: `tasks` tasks
  each awaiting one WF put), confirmed messages per second and the latency of each
  (publish call -> its confirm);
- put -> get -> confirm: one publisher waiting for each confirm before the next
  publish (MRS: one putter awaiting each put) and one consumer on a second channel,
  prefetch 1000, acking each message (MRS: one consumer doing get then confirm); counted:
  messages acked within the window. An AMQP ack is not answered, so the consumer does
  not wait for its ack to be durable as the MRS consumer waits for its confirm: a shape
  slightly in RabbitMQ's favour;
- paced: one publisher sending at `rate` messages/s on a schedule (open loop: a late
  confirm does not delay the next publish), confirm latency p50/p99.

pika comes with the test extra (`pip install -e '.[test]'`), not with MRS itself.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import pika
from pika.adapters.select_connection import SelectConnection

BODY = b"x" * 256
PERSISTENT = pika.BasicProperties(delivery_mode=2)
PORT_DEFAULT = 5701  # node 1 of benchmarks/rabbitmq_cluster.sh
WARM_UP_MESSAGES = 50
TICK_S = 0.001  # the paced publisher's timer
GIVE_UP_S = 60.0


def parameters(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest"), heartbeat=0
    )


def fresh_quorum_queue(port: int, name: str) -> None:
    """Declare `name` anew as a quorum queue with a member on each of the 3 nodes."""
    connection = pika.BlockingConnection(parameters(port))
    channel = connection.channel()
    channel.queue_delete(name)
    channel.queue_declare(
        name,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 3},
    )
    connection.close()


def delete_queue(port: int, name: str) -> None:
    connection = pika.BlockingConnection(parameters(port))
    connection.channel().queue_delete(name)
    connection.close()


def server_version(port: int) -> str:
    connection = pika.BlockingConnection(parameters(port))
    version = connection._impl.server_properties.get("version", b"?")
    connection.close()
    return version.decode() if isinstance(version, bytes) else str(version)


class Publisher:
    """A confirming publisher on one channel: which delivery tags wait for their
    confirm and since when, so each confirm (single or `multiple`) gives latencies."""

    def __init__(self, channel: Any, queue: str) -> None:
        self.channel = channel
        self.queue = queue
        self.sent_s: dict[int, float] = {}  # delivery tag -> perf_counter at publish
        self.tag = 0
        self.oldest = 1
        self.latencies: list[float] = []  # confirmed ones only (nacks are left out)

    def publish(self) -> None:
        self.tag += 1
        self.sent_s[self.tag] = time.perf_counter()
        self.channel.basic_publish("", self.queue, BODY, PERSISTENT)

    def settle(self, frame: Any) -> int:
        """Take a Basic.Ack/Nack; returns how many messages it confirmed."""
        method = frame.method
        now_s = time.perf_counter()
        nack = isinstance(method, pika.spec.Basic.Nack)
        if method.multiple:
            tags = range(self.oldest, method.delivery_tag + 1)
            self.oldest = max(self.oldest, method.delivery_tag + 1)
        else:
            tags = range(method.delivery_tag, method.delivery_tag + 1)
        confirmed = 0
        for tag in tags:
            sent_s = self.sent_s.pop(tag, None)
            if sent_s is not None and not nack:
                self.latencies.append(now_s - sent_s)
                confirmed += 1
        while self.oldest <= self.tag and self.oldest not in self.sent_s:
            self.oldest += 1
        return confirmed


def run_connection(
    port: int, seconds: float, on_channel: Callable[[SelectConnection, Any], None]
) -> None:
    """Open one connection and a channel, hand both to `on_channel`, and run the I/O
    loop until that code closes the connection; a shape still running GIVE_UP_S after
    its `seconds` (confirms that never came) is closed and reported, not waited for."""
    failure: list[BaseException | str] = []

    def opened(connection: SelectConnection) -> None:
        connection.channel(on_open_callback=lambda channel: on_channel(connection, channel))
        connection.ioloop.call_later(seconds + GIVE_UP_S, lambda: give_up(connection))

    def give_up(connection: SelectConnection) -> None:
        if connection.is_open:
            failure.append(f"the shape did not finish {GIVE_UP_S} s after its {seconds} s")
            connection.close()

    def open_failed(connection: SelectConnection, error: BaseException | str) -> None:
        failure.append(error)
        connection.ioloop.stop()

    connection = SelectConnection(
        parameters(port),
        on_open_callback=opened,
        on_open_error_callback=open_failed,
        on_close_callback=lambda connection, _reason: connection.ioloop.stop(),
    )
    connection.ioloop.start()
    if failure:
        raise RuntimeError(f"RabbitMQ on 127.0.0.1:{port}: {failure[0]}")


def confirms(port: int, queue: str, seconds: float, window: int) -> tuple[float, list[float]]:
    """(confirmed messages per second, each one's confirm latency in s): one publisher
    keeping `window` messages unconfirmed, for `seconds`."""
    state: dict[str, float] = {}
    holder: list[Publisher] = []

    def on_channel(connection: SelectConnection, channel: Any) -> None:
        publisher = Publisher(channel, queue)
        holder.append(publisher)

        def pump() -> None:
            now_s = time.perf_counter()
            settled = publisher.tag - len(publisher.sent_s)
            if "end_s" not in state and settled >= WARM_UP_MESSAGES:  # warm-up not counted
                publisher.latencies.clear()
                state["end_s"] = now_s + seconds
            if now_s < state.get("end_s", now_s + 1):
                while len(publisher.sent_s) < window:
                    publisher.publish()
            elif not publisher.sent_s:
                connection.close()

        def on_confirm(frame: Any) -> None:
            publisher.settle(frame)
            if "end_s" in state and time.perf_counter() <= state["end_s"]:
                state["counted"] = len(publisher.latencies)
            pump()

        channel.confirm_delivery(on_confirm, callback=lambda _frame: pump())

    run_connection(port, seconds, on_channel)
    counted = int(state.get("counted", 0))
    return counted / seconds, holder[0].latencies[:counted]


def through(port: int, queue: str, seconds: float, prefetch: int = 1000) -> float:
    """Messages per second taken all the way: one publisher awaiting each confirm, one
    consumer (its own channel, same connection) acking each message it is given."""
    state: dict[str, float] = {"acked": 0}

    def on_channel(connection: SelectConnection, channel: Any) -> None:
        publisher = Publisher(channel, queue)
        state["end_s"] = time.perf_counter() + seconds

        def on_confirm(frame: Any) -> None:
            publisher.settle(frame)
            if time.perf_counter() < state["end_s"]:
                publisher.publish()

        def on_message(consumer: Any, method: Any, _properties: Any, _body: bytes) -> None:
            consumer.basic_ack(method.delivery_tag)
            if time.perf_counter() < state["end_s"]:
                state["acked"] += 1

        def on_consumer(consumer: Any) -> None:
            consumer.basic_qos(
                prefetch_count=prefetch,
                callback=lambda _frame: consumer.basic_consume(queue, on_message, auto_ack=False),
            )
            channel.confirm_delivery(on_confirm, callback=lambda _frame: publisher.publish())
            connection.ioloop.call_later(seconds, connection.close)

        connection.channel(on_open_callback=on_consumer)

    run_connection(port, seconds, on_channel)
    return state["acked"] / seconds


def paced(port: int, queue: str, seconds: float, rate_per_s: float) -> tuple[float, list[float]]:
    """(messages confirmed per second, each one's confirm latency in s): one publisher
    sending `rate_per_s x seconds` messages on a fixed schedule, not waiting for confirms."""
    total = int(rate_per_s * seconds)
    holder: list[Publisher] = []
    times: dict[str, float] = {}

    def on_channel(connection: SelectConnection, channel: Any) -> None:
        publisher = Publisher(channel, queue)
        holder.append(publisher)

        def tick() -> None:
            due = min(total, int((time.perf_counter() - times["start_s"]) * rate_per_s) + 1)
            while publisher.tag - WARM_UP_MESSAGES < due:
                publisher.publish()
            if publisher.tag - WARM_UP_MESSAGES < total:
                connection.ioloop.call_later(TICK_S, tick)

        def on_confirm(frame: Any) -> None:
            publisher.settle(frame)
            if publisher.tag == WARM_UP_MESSAGES and not publisher.sent_s:  # warmed up
                publisher.latencies.clear()
                times["start_s"] = time.perf_counter()
                tick()
            elif publisher.tag == WARM_UP_MESSAGES + total and not publisher.sent_s:
                times["end_s"] = time.perf_counter()
                connection.close()

        def warm_up(_frame: Any) -> None:
            for _ in range(WARM_UP_MESSAGES):
                publisher.publish()

        channel.confirm_delivery(on_confirm, callback=warm_up)

    run_connection(port, seconds, on_channel)
    latencies = holder[0].latencies
    return len(latencies) / (times["end_s"] - times["start_s"]), latencies


def all_shapes(
    port: int, seconds: float, window: int, rate_per_s: float
) -> tuple[float, list[float], float, float, list[float]]:
    """The three shapes, each on a fresh quorum queue: (confirms/s, their latencies,
    put->get->confirm/s, paced confirms/s, paced latencies)."""
    results: list[Any] = []
    for name, shape in (
        ("mrs-bench-confirms", lambda q: confirms(port, q, seconds, window)),
        ("mrs-bench-through", lambda q: through(port, q, seconds)),
        ("mrs-bench-paced", lambda q: paced(port, q, seconds, rate_per_s)),
    ):
        fresh_quorum_queue(port, name)
        try:
            results.append(shape(name))
        finally:
            delete_queue(port, name)
    (rate, latencies), through_rate, (paced_rate, paced_latencies) = results
    return rate, latencies, through_rate, paced_rate, paced_latencies


def percentile_ms(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=PORT_DEFAULT)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tasks", type=int, default=32, help="confirms window")
    parser.add_argument("--rate", type=float, default=1000.0, help="paced messages/s")
    args = parser.parse_args()
    print(f"RabbitMQ {server_version(args.port)}, quorum queue x3 on 127.0.0.1:{args.port}")
    rate, latencies, through_rate, paced_rate, paced_latencies = all_shapes(
        args.port, args.seconds, args.tasks, args.rate
    )
    print(
        f"confirms, window {args.tasks}: {rate:.0f}/s  p50 {percentile_ms(latencies, 0.5):.2f} ms"
        f"  p99 {percentile_ms(latencies, 0.99):.2f} ms"
    )
    print(f"put->get->confirm (1 publisher, 1 consumer): {through_rate:.0f}/s")
    print(
        f"paced {args.rate:g}/s: {paced_rate:.0f}/s reached  "
        f"p50 {percentile_ms(paced_latencies, 0.5):.2f} ms  "
        f"p99 {percentile_ms(paced_latencies, 0.99):.2f} ms"
    )


if __name__ == "__main__":
    main()
