"""The per-batch work shared by the learner and the replicas: decode, dead-letter, tokenize, publish.

Header names on the wire (stable; subscribers filter on them without parsing bodies):

* output: ``topicstream-topic`` (dominant topic id), ``topicstream-topics`` (comma-separated ids of
  ``top_topics``), ``topicstream-model-version``, ``topicstream-algorithm``;
* dead letters: ``topicstream-error-reason``, ``topicstream-error-detail``, ``topicstream-source-topic``,
  ``topicstream-source-partition``, ``topicstream-source-offset`` (the original headers are kept too).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
from confluent_kafka import KafkaError, Message, Producer
from numpy.typing import NDArray

from .kafka import DeliveryTracker
from .metrics import Metrics
from .schemas import Article, Rejection, decode_article
from .settings import Settings
from .text import Tokenizer

__all__ = ["Decoded", "Publisher", "TopicLabels", "decode_batch", "tokenize"]

H_TOPIC = "topicstream-topic"
H_TOPICS = "topicstream-topics"
H_VERSION = "topicstream-model-version"
H_ALGORITHM = "topicstream-algorithm"
H_REASON = "topicstream-error-reason"
H_DETAIL = "topicstream-error-detail"
H_SRC_TOPIC = "topicstream-source-topic"
H_SRC_PARTITION = "topicstream-source-partition"
H_SRC_OFFSET = "topicstream-source-offset"


@dataclass
class Decoded:
    """A consumed batch split into good articles and rejected messages (input order kept in each)."""

    good: list[tuple[Message, Article]]
    bad: list[tuple[Message, Rejection]]


def decode_batch(msgs: list[Message], max_bytes: int) -> Decoded:
    good: list[tuple[Message, Article]] = []
    bad: list[tuple[Message, Rejection]] = []
    for m in msgs:
        result = decode_article(m.value(), max_bytes)
        if isinstance(result, Rejection):
            bad.append((m, result))
        else:
            good.append((m, result))
    return Decoded(good, bad)


def tokenize(tokenizer: Tokenizer, articles: list[Article]) -> list[Counter[str]]:
    return [tokenizer.count(a.content()) for a in articles]


class TopicLabels:
    """Human labels for topics: the top words of each topic's φ row, from the vocabulary's slots."""

    def __init__(self, phi: NDArray[np.float64], slot_words: list[str], n_words: int = 10, block: int = 8) -> None:
        k, w = phi.shape
        n = min(n_words, w)
        self.top_ids = np.empty((k, n), dtype=np.int64)
        # A few rows at a time: a whole-matrix argpartition would allocate two more K×W arrays.
        for i in range(0, k, block):
            rows = phi[i : i + block]
            top = np.argpartition(rows, w - n, axis=1)[:, w - n :]
            order = np.argsort(-np.take_along_axis(rows, top, axis=1), axis=1, kind="stable")
            self.top_ids[i : i + block] = np.take_along_axis(top, order, axis=1)
        self.top_words: list[list[str]] = [[slot_words[i] for i in row if slot_words[i]] for row in self.top_ids]
        self.labels = [" ".join(words[:3]) for words in self.top_words]


class Publisher:
    """Writes output events and dead letters; every send is tracked until the broker acknowledges it."""

    def __init__(self, producer: Producer, settings: Settings, metrics: Metrics) -> None:
        self.producer = producer
        self.settings = settings
        self.metrics = metrics
        self.tracker = DeliveryTracker()

    def _output_delivered(self, input_ts: float) -> Callable[[KafkaError | None, Message], None]:
        """Delivery callback of one output: track it, and on success count it and observe its latency."""

        def callback(err: KafkaError | None, msg: Message) -> None:
            self.tracker.callback(err, msg)
            if err is None:
                self.metrics.published.inc()
                self.metrics.latency.observe(max(0.0, time.time() - input_ts))

        return callback

    def _produce(
        self,
        topic: str,
        key: bytes | str | None,
        value: bytes,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        callback = on_delivery or self.tracker.callback
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=headers, on_delivery=callback)
                return
            except BufferError:  # local queue full: let deliveries drain, then retry
                self.producer.poll(0.1)

    def dead_letter(self, msg: Message, rejection: Rejection) -> None:
        original = msg.headers() or []
        headers: list[tuple[str, str | bytes | None]]
        headers = list(original.items() if isinstance(original, dict) else original)
        headers += [
            (H_REASON, rejection.reason.encode()),
            (H_DETAIL, rejection.detail[:2000].encode("utf-8", "replace")),
            (H_SRC_TOPIC, (msg.topic() or "").encode()),
            (H_SRC_PARTITION, str(msg.partition()).encode()),
            (H_SRC_OFFSET, str(msg.offset()).encode()),
        ]
        self._produce(self.settings.dlq_topic, msg.key(), msg.value() or b"", headers)
        self.metrics.dead_lettered.labels(reason=rejection.reason).inc()

    def publish(
        self,
        good: list[tuple[Message, Article]],
        theta: NDArray[np.float64],
        tokens: NDArray[np.float64],
        labels: TopicLabels,
        algorithm: str,
        version: int,
    ) -> None:
        """One output event per article; ``theta`` rows are the mixtures, ``tokens`` the in-vocab counts."""
        s = self.settings
        n_topics = theta.shape[1]
        model = {"algorithm": algorithm, "version": version, "topics": n_topics}
        now = datetime.now(timezone.utc).isoformat()
        consumed_at = time.time()
        order = np.argsort(-theta, axis=1)[:, : s.top_topics_max]
        mixtures = np.round(theta, 6).tolist()
        version_b, algorithm_b = str(version).encode(), algorithm.encode()
        for j, (msg, article) in enumerate(good):
            row = theta[j]
            top = [
                {"topic": int(k), "weight": round(float(row[k]), 6), "label": labels.labels[k]}
                for k in order[j]
                if row[k] >= s.top_topics_threshold
            ]
            event = {
                "id": article.id,
                "model": model,
                "mixture": mixtures[j],
                "top_topics": top,
                "published_at": article.published_at.isoformat() if article.published_at else None,
                "processed_at": now,
                "title": article.title,
                "url": article.url,
                "tokens": int(tokens[j]),
            }
            headers: list[tuple[str, str | bytes | None]] = [
                (H_TOPIC, str(int(order[j, 0])).encode()),
                (H_TOPICS, ",".join(str(t["topic"]) for t in top).encode()),
                (H_VERSION, version_b),
                (H_ALGORITHM, algorithm_b),
            ]
            _, ts_ms = msg.timestamp()
            input_ts = ts_ms / 1000.0 if ts_ms > 0 else consumed_at
            self._produce(
                s.output_topic,
                article.id,
                json.dumps(event).encode(),
                headers,
                self._output_delivered(input_ts),
            )
