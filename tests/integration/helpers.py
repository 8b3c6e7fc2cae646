"""Helpers for tests that talk to a real broker and Redis: produce, read back, committed offsets, articles.

The fixtures that start the broker and Redis (``endpoints``, ``settings``) live in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from service.feeds import FeedMetrics
from service.metrics import Metrics
from service.settings import Settings
from service.worker import BatchWorker

__all__ = [
    "BAD",
    "CONNECTION_FIELDS",
    "TEST_SETTINGS",
    "TEST_SIZE_FIELDS",
    "article",
    "committed",
    "env_for",
    "good_articles",
    "produce",
    "produce_keyed",
    "read_all",
    "run_until",
    "sample",
]


def produce(
    settings: Settings, values: list[bytes], keys: list[bytes | None] | None = None, partition: int | None = None
) -> dict[int, int]:
    """Send ``values`` to the input topic (to ``partition`` if given); returns partition → last acknowledged
    offset (delivery reports)."""
    return _send(settings, zip(keys or [None] * len(values), values, strict=True), partition=partition)


def produce_keyed(settings: Settings, records: list[tuple[bytes | None, bytes | None]]) -> dict[int, int]:
    """Send ``(key, value)`` records (a ``None`` value is a tombstone) to the input topic, spread over its
    partitions by key; returns partition → last acknowledged offset (delivery reports)."""
    return _send(settings, records, linger_ms=20)


def _send(
    settings: Settings,
    records: Iterable[tuple[bytes | None, bytes | None]],
    partition: int | None = None,
    linger_ms: int = 0,
) -> dict[int, int]:
    """Produce ``(key, value)`` records to the input topic, wait for every acknowledgement (failures fail the
    test) and return partition → last acknowledged offset."""
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "acks": "all", "linger.ms": linger_ms})
    last: dict[int, int] = {}
    failures: list[str] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            p, offset = msg.partition(), msg.offset()
            assert p is not None and offset is not None, "a delivery report names its partition and offset"
            last[p] = max(last.get(p, -1), offset)

    for key, value in records:
        while True:
            try:
                if partition is None:
                    producer.produce(settings.input_topic, value=value, key=key, on_delivery=report)
                else:
                    producer.produce(
                        settings.input_topic, value=value, key=key, partition=partition, on_delivery=report
                    )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures
    return last


def read_all(settings: Settings, topic: str, expected: int, timeout: float = 60.0, linger: float = 3.0) -> list:
    """Read ``expected`` messages from ``topic`` from the beginning (the test fails later if they don't come).

    The reader assigns itself every partition (no consumer group): a group member can lose its session on a busy
    machine and read everything again, which would look like duplicates the service never wrote. After
    ``expected`` messages it keeps reading for ``linger`` seconds, so a duplicate or stray written late is caught.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": "unused-reader",  # required by librdkafka; never joined (assign, no commits)
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(500, 0.5) if m.error() is None)
        end = time.monotonic() + linger
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


#: One message of every kind of bad input, with the dead-letter reason it must get.
BAD = {
    b"not json at all": "not_json",
    b"\xff\xfe garbage": "not_utf8",
    b"[1, 2, 3]": "not_object",
    b'{"text": "no id here"}': "invalid",
    b'{"id": 42, "text": "id is not a string"}': "invalid",
    b'{"id": "x", "text": "", "title": ""}': "invalid",
    b'{"id": "big", "text": "' + b"a" * 5000 + b'"}': "oversize",
}


def good_articles(n: int, seed: int = 0) -> list[bytes]:
    """``n`` generated articles (15 planted news topics), as input messages."""
    from service.dev.generator import generate_articles

    return [json.dumps(a).encode() for a in generate_articles(n, seed=seed)]


def sample(metrics: Metrics | FeedMetrics, name: str, **labels: str) -> float:
    """The current value of one sample of ``metrics`` (0 when it has not been set), read like a scrape."""
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def run_until(worker: BatchWorker, consumed: int, timeout: float = 180.0) -> None:
    """Run ``worker`` in a thread until it has consumed ``consumed`` messages, then stop it as SIGTERM would
    (publish and flush what is in flight, final snapshot, commit)."""
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, consumed), daemon=True)
    thread.start()
    thread.join(timeout)
    stop.set()
    thread.join(60)
    assert not thread.is_alive(), "worker did not stop"
    assert sample(worker.metrics, "topicstream_articles_consumed_total") == consumed


#: Where a process finds the broker, Redis, its topics and its snapshots.
CONNECTION_FIELDS = ("kafka_bootstrap", "redis_url", "input_topic", "output_topic", "dlq_topic", "redis_prefix")
#: The tests' settings besides the names (``tests/conftest.py``, :class:`tests.faults.procs.FaultStack`): a small
#: model, short group timeouts (Tansu waits on them at join), a 2 s lease, no metrics server.
TEST_SETTINGS: dict[str, Any] = {
    "topics": 8,
    "vocab_size": 2048,
    "batch_size": 100,
    "batch_timeout_s": 0.2,
    "max_poll_interval_ms": 2000,
    "session_timeout_ms": 2000,
    "fetch_wait_ms": 50,  # the logs stay small: Tansu, which holds a fetch the whole wait, answers sooner
    "lease_ttl_s": 2,
    "metrics_port": 0,
}
#: The small model and the short timeouts of :data:`TEST_SETTINGS`, for a process's environment.
TEST_SIZE_FIELDS = (
    "topics",
    "vocab_size",
    "batch_size",
    "batch_timeout_s",
    "max_poll_interval_ms",
    "session_timeout_ms",
    "fetch_wait_ms",
)


def env_for(s: Settings, fields: Iterable[str] = CONNECTION_FIELDS) -> dict[str, str]:
    """``fields`` of ``s`` as the ``TOPICSTREAM_*`` environment of a command or a process (dicts and lists as JSON,
    as the settings read them)."""

    def text(value: Any) -> str:
        return json.dumps(value) if isinstance(value, dict | list) else str(value)

    return {f"TOPICSTREAM_{f.upper()}": text(getattr(s, f)) for f in fields}
