"""``topicstream replica``: inference-only workers that serve mixtures from the learner's snapshots.

Replicas form their own consumer group on the input topic (so they scale with its partitions), load the newest
snapshot from Redis, and reload whenever the learner announces a new version (pub/sub, with a periodic check of
``latest`` as a fallback). They never change the model or the vocabulary. Bad input is the learner's to
dead-letter; a replica skips it and counts it under ``topicstream_errors_total{kind="rejected_input"}``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from kernels import ALGORITHMS, TopicModel

from .checkpoint import Checkpointer
from .kafka import make_consumer, make_producer
from .metrics import Metrics
from .pipeline import Publisher, TopicLabels, decode_batch, tokenize
from .settings import Settings
from .snapshot import SnapshotCorrupt, SnapshotStore
from .text import Tokenizer, Vocabulary

__all__ = ["Replica"]

log = logging.getLogger(__name__)


class Replica:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        store: SnapshotStore | None = None,
    ) -> None:
        self.settings = s = settings
        self.metrics = metrics or Metrics("replica")
        self.store = store or SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix)
        self.tokenizer = Tokenizer()
        self.model: TopicModel | None = None
        self.vocab: Vocabulary | None = None
        self.labels: TopicLabels | None = None
        self.version = 0
        self.consumer = make_consumer(s, s.replica_group(), **(consumer_overrides or {}))
        self.producer = make_producer(s)
        self.publisher = Publisher(self.producer, s, self.metrics)
        self.checkpointer = Checkpointer(self.producer, self.publisher.tracker, self.consumer, None, s, self.metrics)
        self._last_check = 0.0

    def reload(self, version: int | None = None) -> bool:
        """Load ``version`` (default: the latest) if it is newer than ours; True when the model changed."""
        latest = version if version is not None else self.store.latest_version()
        if latest is None or latest <= self.version:
            return False
        t0 = time.perf_counter()
        try:
            loaded = self.store.load(latest)
        except SnapshotCorrupt:
            self.metrics.snapshot_failures.inc()
            log.exception("snapshot %d is corrupt; keeping version %d", latest, self.version)
            return False
        if loaded is None:
            return False
        meta, payload = loaded
        kstate = payload["kernel"]
        cls = ALGORITHMS[kstate["algorithm"]]
        if self.model is None or type(self.model) is not cls:
            cls.warm_up()
        self.model = cls.from_state(kstate)
        self.vocab = Vocabulary.from_state(payload["vocabulary"])
        self.labels = TopicLabels(self.model.topic_word(), self.vocab.slot_words())
        self.version = int(meta["version"])
        m = self.metrics
        m.snapshot_duration.observe(time.perf_counter() - t0)
        m.snapshot_version.set(self.version)
        m.snapshot_size.set(int(meta["size_bytes"]))
        m.snapshot_timestamp.set(float(meta["created_at"]))
        m.describe_model(kstate["algorithm"], self.model.n_topics, self.model.n_words)
        log.info("serving snapshot %d", self.version)
        return True

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._last_check >= 2.0:
            self._last_check = now
            self.reload()

    def process(self, msgs: list[Any]) -> None:
        assert self.model is not None and self.vocab is not None and self.labels is not None
        decoded = decode_batch(msgs, self.settings.max_article_bytes)
        if decoded.bad:
            self.metrics.errors.labels(kind="rejected_input").inc(len(decoded.bad))
        articles = [a for _, a in decoded.good]
        encoded = self.vocab.encode(tokenize(self.tokenizer, articles), learn=False)
        batch = encoded.batch
        theta = self.model.transform(batch) if articles else np.zeros((0, self.model.n_topics))
        tokens = batch.doc_tokens()
        self.publisher.publish(decoded.good, theta, tokens, self.labels, self.model.algorithm, self.version)
        self.checkpointer.after_batch(msgs, {})
        self.metrics.consumed.inc(len(msgs))
        self.metrics.batches.inc()
        self.metrics.tokens.inc(float(batch.counts.sum()))
        self.metrics.oov_tokens.inc(encoded.oov_tokens)

    def run(self, stop: threading.Event | None = None, max_batches: int | None = None) -> None:
        stop = stop or threading.Event()
        s = self.settings
        while self.model is None and not self.reload():
            if stop.wait(1.0):
                return
            log.info("waiting for the learner's first snapshot under prefix %r", s.redis_prefix)
        self.consumer.subscribe([s.input_topic])
        batches = 0
        try:
            while not stop.is_set() and (max_batches is None or batches < max_batches):
                msgs = [m for m in self.consumer.consume(s.batch_size, s.batch_timeout_s) if m.error() is None]
                if msgs:
                    self.process(msgs)
                    batches += 1
                self._maybe_reload()
        finally:
            self.checkpointer.final()
            self.consumer.close()
