"""benchmarks/rabbitmq_quorum.py's confirm bookkeeping: RabbitMQ confirms one
delivery tag or every tag up to one (`multiple`), acks or nacks; each confirmed
message gives one latency, a nack none, and a tag is never counted twice (the
quorum-queue side of issue 51's comparison counts its rate from these)."""

from __future__ import annotations

from typing import Any

import pika  # the test extra's AMQP client (pyproject.toml)

from benchmarks.rabbitmq_quorum import Publisher


class Channel:
    def __init__(self) -> None:
        self.published: list[str] = []

    def basic_publish(self, exchange: str, queue: str, body: bytes, properties: Any) -> None:
        self.published.append(queue)


class Frame:
    def __init__(self, method: Any) -> None:
        self.method = method


def ack(tag: int, multiple: bool = False) -> Frame:
    return Frame(pika.spec.Basic.Ack(delivery_tag=tag, multiple=multiple))


def nack(tag: int, multiple: bool = False) -> Frame:
    return Frame(pika.spec.Basic.Nack(delivery_tag=tag, multiple=multiple))


def test_single_multiple_and_nacked_confirms_each_count_once() -> None:
    channel = Channel()
    publisher = Publisher(channel, "q")
    for _ in range(10):
        publisher.publish()
    assert channel.published == ["q"] * 10 and len(publisher.sent_s) == 10
    assert publisher.settle(ack(2)) == 1  # out of order: tag 1 still waits
    assert publisher.settle(ack(4, multiple=True)) == 3  # 1, 3 and 4 (2 already)
    assert publisher.settle(ack(4, multiple=True)) == 0  # again: nothing new
    assert publisher.settle(nack(6, multiple=True)) == 0  # 5 and 6 refused
    assert publisher.settle(ack(10, multiple=True)) == 4  # 7 to 10
    assert len(publisher.latencies) == 8 and not publisher.sent_s
    assert all(latency_s >= 0 for latency_s in publisher.latencies)
    publisher.publish()
    assert publisher.settle(ack(11)) == 1 and publisher.oldest == 12
