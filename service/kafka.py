"""A thin, typed layer over confluent-kafka: client configuration, topic creation, delivery tracking.

Every client gets ``TOPICSTREAM_KAFKA_CONFIG`` (JSON of librdkafka settings, e.g. SASL/TLS) on top of ours.
Every client logs through Python's logging (logger ``librdkafka``), one line of a kind a minute: a broker that is
down makes librdkafka repeat its connection failure hundreds of times a minute (measured: 578 lines in the 30 s a
command waited at its start, when admin clients still wrote to stderr).
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer as _Consumer
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from .settings import Settings

__all__ = [
    "DeliveryError",
    "DeliveryTracker",
    "OncePerWindow",
    "check_reachable",
    "ensure_topics",
    "flush_all",
    "given_id",
    "make_admin",
    "make_consumer",
    "make_producer",
    "next_offsets",
    "producer_max_bytes",
    "size_limit",
    "topic_id",
]

log = logging.getLogger(__name__)


class OncePerWindow(logging.Filter):
    """Lets through the first of each kind of line (its text with the numbers taken out) per ``window_s``
    seconds; the next one through says how many were held back. Remembers at most ``kinds`` kinds (then forgets
    them all: a flood of distinct lines is not repeats)."""

    def __init__(self, window_s: float = 60.0, kinds: int = 1000) -> None:
        super().__init__()
        self.window_s, self.kinds = window_s, kinds
        self._last: dict[str, tuple[float, int]] = {}  # kind -> (when one went through, held back since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            if len(self._last) >= self.kinds:
                self._last.clear()
            when, held = self._last.get(kind, (-float("inf"), 0))
            if now - when < self.window_s:
                self._last[kind] = (when, held + 1)
                return False
            self._last[kind] = (now, 0)
        if held:
            record.msg, record.args = f"{record.getMessage()} ({held} more like it in the last minute)", None
        return True


#: librdkafka's own log lines (consumers and producers), repeats held back (:class:`OncePerWindow`).
RDKAFKA_LOG = logging.getLogger("librdkafka")
RDKAFKA_LOG.addFilter(OncePerWindow())


class DeliveryError(RuntimeError):
    """The broker did not acknowledge a message; its offsets must not be committed."""


def _base(settings: Settings) -> dict[str, str | int | bool]:
    return {"bootstrap.servers": settings.kafka_bootstrap, "client.id": "topicstream"}


def make_consumer(settings: Settings, group_id: str, **overrides: Any) -> _Consumer:
    """A consumer that never commits by itself and never stores offsets behind our back."""
    # The session must not outlast max.poll.interval.ms (librdkafka refuses it), also when TOPICSTREAM_KAFKA_CONFIG
    # sets only the latter (a common tip for brokers whose group joins wait on it).
    poll = str(settings.kafka_config.get("max.poll.interval.ms", ""))
    max_poll = int(poll) if poll.isdigit() else settings.max_poll_interval_ms
    session = min(settings.session_timeout_ms, max_poll)
    conf: dict[str, Any] = {
        **_base(settings),
        "logger": RDKAFKA_LOG,  # served by poll(), which the loops call all the time
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "max.poll.interval.ms": settings.max_poll_interval_ms,
        "session.timeout.ms": session,
        # A third of the session timeout, as Kafka advises: librdkafka's fixed 3 s default lets any short session
        # (tests use 3 s) expire on one late heartbeat, and every expiry is a rebalance.
        "heartbeat.interval.ms": max(100, session // 3),
        # Prefetch a few batches, not librdkafka's default 64 MB of queued messages: memory stays flat and small.
        "queued.max.messages.kbytes": 16384,
        # How long a broker may hold a fetch that finds no new data (Settings.fetch_wait_ms; README, "Latency and
        # throughput"): Kafka answers as soon as data arrives; Tansu holds it the whole wait.
        "fetch.wait.max.ms": settings.fetch_wait_ms,
        **settings.kafka_config,
        **overrides,
    }
    return _Consumer(conf)


def make_producer(settings: Settings, **overrides: str | int | bool) -> Producer:
    """A producer that waits for all in-sync replicas and retries until the broker answers.

    It is not idempotent (librdkafka's default): with five requests in flight, a batch retried after a broker
    error may land after a later one, or twice. Delivery is at least once either way, and outputs and dead
    letters are keyed by article id; ``TOPICSTREAM_KAFKA_CONFIG='{"enable.idempotence": "true"}'`` keeps the order
    where the brokers support it."""
    conf: dict[str, Any] = {
        **_base(settings),
        "logger": RDKAFKA_LOG,  # served by poll() and flush()
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 500_000,
        "max.in.flight.requests.per.connection": 5,
        # Retry until the broker answers: a broker outage of minutes must not fail a batch (and stop the
        # learner); permanent errors (too large, not authorised) are still reported at once.
        "message.timeout.ms": 0,
        **settings.kafka_config,
        **overrides,
    }
    return Producer(conf)


#: librdkafka's default ``message.max.bytes``: the largest request (a batch of messages, or one message) it sends.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: The smallest ``message.max.bytes`` librdkafka takes.
MIN_MESSAGE_MAX_BYTES = 1_000
#: What a topic's limit counts beyond librdkafka's check of one message: the record batch's header (61 bytes) and
#: the record's length fields (a helper's proxy: with the cap at the limit, values up to ~160 bytes under it passed
#: librdkafka and the broker refused their batches).
BATCH_OVERHEAD = 256


def producer_max_bytes(settings: Settings) -> int:
    """The producer's own ``message.max.bytes``: ``TOPICSTREAM_KAFKA_CONFIG``'s, else librdkafka's default."""
    return int(settings.kafka_config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))


def size_limit(
    settings: Settings,
    topics: Iterable[str],
    timeout: float | None = None,
    refused: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """The producer setting that keeps its requests within what the brokers take for ``topics``: Kafka refuses a
    record batch over its topic's ``max.message.bytes`` (MESSAGE_TOO_LARGE) whole, so a topic created with a
    smaller limit than the producer's ``message.max.bytes`` (1,000,000 by default) had every full batch refused,
    and the learner stopped and read the batch again, for ever (a helper's proxy that enforces the limit, as Kafka
    does: 11 restarts a minute, no output). With ``message.max.bytes`` at the smallest topic limit less
    :data:`BATCH_OVERHEAD`, librdkafka fills smaller batches and refuses a larger message at ``produce``
    (:class:`service.pipeline.Publisher` then sends what fits).

    ``refused``: topic → the size of the batches the brokers refused for that topic as too large, at most
    (:mod:`service.refusals`, remembered in Redis). It counts only for a topic whose limit the brokers do not say
    (DescribeConfigs not allowed, or the topic not created yet), and only when it is not above the producer's own
    ``message.max.bytes``, as half that size: each refusal halves the next start's batches until they fit, where
    before every start was refused again. A limit the brokers say wins (one that was lowered and raised again is
    read as it is now).

    ``{}`` when no topic is under the producer's own limit, or neither the brokers nor ``refused`` say."""
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    own = producer_max_bytes(settings)
    wanted = list(dict.fromkeys(topics))
    said = _topic_limits(settings, wanted, timeout)
    caps = {t: limit - BATCH_OVERHEAD for t, limit in said.items()}
    # A refusal at a size above what the producer now sends (its message.max.bytes set smaller since) says nothing.
    guessed = {t: refused[t] // 2 for t in wanted if t not in said and refused and 0 < refused.get(t, own + 1) <= own}
    caps.update(guessed)
    if not caps or min(caps.values()) >= own:
        return {}
    topic, cap = min(caps.items(), key=lambda item: item[1])
    capped = max(MIN_MESSAGE_MAX_BYTES, cap)
    if topic in guessed:
        log.warning(
            "the brokers refused batches of at most %d bytes for topic %s as too large and do not say its limit: the "
            "producer's message.max.bytes is %d (grant DescribeConfigs on the topic, or set message.max.bytes in "
            "TOPICSTREAM_KAFKA_CONFIG and delete the topic's field from the Redis hash <prefix>:producer:refused)",
            refused[topic] if refused else 0,
            topic,
            capped,
        )
    else:
        log.warning(
            "topic %s takes messages of at most %d bytes (max.message.bytes): the producer's message.max.bytes is "
            "%d (a dead letter over it goes without its value, an output without its title and url)",
            topic,
            said[topic],
            capped,
        )
    return {"message.max.bytes": capped}


def _topic_limits(settings: Settings, topics: list[str], timeout: float) -> dict[str, int]:
    """The ``max.message.bytes`` of each of ``topics`` that the brokers tell within ``timeout``; a topic they do
    not (not created yet, DescribeConfigs not allowed) is left out, with a warning unless it does not exist."""
    admin = make_admin(settings)
    limits: dict[str, int] = {}
    try:
        futures = admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t) for t in topics], request_timeout=timeout
        )
    except KafkaException as e:
        log.info("topic size limits not known (%s)", e)
        return {}
    for resource, future in futures.items():
        try:
            entry = future.result(timeout=timeout).get("max.message.bytes")
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:  # one that does not exist yet: nothing to say
                log.warning("the size limit of topic %s is not known (%s): grant DescribeConfigs on it, or set "
                            "message.max.bytes in TOPICSTREAM_KAFKA_CONFIG", resource.name, e)  # fmt: skip
            continue
        except concurrent.futures.TimeoutError:
            log.warning("the brokers did not say the size limit of topic %s within %.0f s", resource.name, timeout)
            continue
        if entry is not None and str(entry.value).isdigit():
            limits[resource.name] = int(entry.value)
    return limits


def make_admin(settings: Settings) -> AdminClient:
    """An admin client whose lines wait for its ``poll()``: a long-lived one's holder polls it (the learner, each
    turn of its loop); a short-lived one is polled when a request fails, so that librdkafka's reason is said once
    (:func:`_topic_names`), and its other lines are dropped with it."""
    conf: dict[str, Any] = {**_base(settings), "logger": RDKAFKA_LOG, **settings.kafka_config}
    return AdminClient(conf)


#: How long a command waits for a broker to answer at its start before it says it cannot reach one (exit 3).
CONNECT_TIMEOUT_S = 30.0


def _topic_names(admin: AdminClient, timeout: float) -> set[str]:
    """The brokers' topics, or KafkaException when none answers within ``timeout`` seconds, after handing what
    ``admin``'s librdkafka said meanwhile to the ``librdkafka`` logger (one line of a kind a minute)."""
    try:
        return set(admin.list_topics(timeout=timeout).topics)
    except KafkaException:
        admin.poll(0)
        raise


def check_reachable(settings: Settings, timeout: float | None = None) -> None:
    """Raise KafkaException when no broker answers a metadata request within ``timeout`` seconds (so a process
    that needs Kafka says so at its start instead of retrying quietly for ever)."""
    _topic_names(make_admin(settings), CONNECT_TIMEOUT_S if timeout is None else timeout)


def ensure_topics(settings: Settings, topics: dict[str, int], timeout: float | None = None) -> None:
    """Create the topics that do not exist yet (name → partitions); existing ones are left alone."""
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    admin = make_admin(settings)
    existing = _topic_names(admin, timeout)
    new = [
        NewTopic(name, num_partitions=n, replication_factor=-1) for name, n in topics.items() if name not in existing
    ]
    if not new:
        return
    for name, fut in admin.create_topics(new, operation_timeout=timeout).items():
        try:
            fut.result(timeout=timeout)
            log.info("created topic %s", name)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


_NO_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # the zero Uuid: a broker that does not give topic ids


def topic_id(
    settings: Settings, topic: str, timeout: float | None = None, admin: AdminClient | None = None
) -> str | None:
    """The brokers' id of ``topic`` (a Kafka topic id, base64; Kafka 2.8+ and Tansu give one), or None when the
    topic does not exist, the brokers give no id or do not answer within ``timeout`` seconds (``admin``: a client
    to reuse; default a new one). A topic deleted and re-created under the same name, or created again by brokers
    that lost their data, has a new id: the offsets of the old one mean nothing in it."""
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    try:
        admin = admin or make_admin(settings)  # held until the answer comes: one destroyed first fails the request
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
        found = str(future.result(timeout=timeout).topic_id)
    except (KafkaException, concurrent.futures.TimeoutError) as e:  # 3.10: not the builtin TimeoutError
        log.info("no topic id for %s (%s)", topic, e)
        return None
    return given_id(found)


def given_id(raw: object) -> str | None:
    """A topic id as the brokers gave it (``TopicDescription.topic_id``), or None when they gave none."""
    found = str(raw)
    return None if found in ("", "None", _NO_ID) else found


#: Failures (and lines skipped) remembered by their reason or line number; beyond that they are only counted.
KEEP_FAILURES = 10


@dataclass
class DeliveryTracker:
    """Counts one batch's sends, the broker's acknowledgements and the failures (naming the first few).

    Call :meth:`sent` for each message handed to the producer and use :meth:`callback` as its ``on_delivery``;
    the batch is :attr:`done` when every send has been answered, and :attr:`failed` says how many failed.
    Callbacks run inside ``producer.poll``/``flush`` (on the polling thread); the lock makes reads from other
    threads safe.
    """

    pending: int = 0
    acked: int = 0
    failed: int = 0
    #: The first few failures' reasons (a tracker may serve a whole live feed: all of them would grow without end).
    failures: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sent(self) -> None:
        with self._lock:
            self.pending += 1

    def callback(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            self.pending -= 1
            if err is not None:
                self.failed += 1
                if len(self.failures) < KEEP_FAILURES:
                    self.failures.append(f"{msg.topic()}: {err}")
            else:
                self.acked += 1

    @property
    def done(self) -> bool:
        with self._lock:
            return self.pending <= 0

    def raise_on_failure(self) -> None:
        with self._lock:
            if self.failed:
                raise DeliveryError(f"{self.failed} message(s) not acknowledged, e.g. {self.failures[0]}")


def flush_all(producer: Producer, timeout: float | None = None) -> None:
    """Wait until every queued message is answered by the broker (``timeout`` None: as long as it takes).

    With ``message.timeout.ms`` = 0 (see :func:`make_producer`) a message is retried until the broker takes it,
    so during a broker outage this waits for the broker to come back instead of failing the batch.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while producer.flush(1.0):
        if deadline is not None and time.monotonic() > deadline:
            raise DeliveryError(f"{len(producer)} message(s) still unacknowledged after {timeout:.0f}s")


def partition_of(m: Message) -> tuple[str, int]:
    """The (topic, partition) a consumed message came from."""
    topic, partition = m.topic(), m.partition()
    assert topic is not None and partition is not None, "not a consumed message"
    return topic, partition


def next_offsets(msgs: Iterable[Message]) -> dict[tuple[str, int], int]:
    """Next offset to read for each (topic, partition) in ``msgs``: the highest offset seen plus one."""
    nxt: dict[tuple[str, int], int] = {}
    for m in msgs:
        key, offset = partition_of(m), m.offset()
        assert offset is not None, "not a consumed message"
        off = offset + 1
        if off > nxt.get(key, -1):
            nxt[key] = off
    return nxt
