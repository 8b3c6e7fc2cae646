"""``topicstream run``: the learner. One process, one writer of the model.

Per batch of messages (see ``../shared/notes/architecture.md``, "Delivery guarantee"):

1. decode and validate; bad messages go to the dead-letter topic with the reason;
2. tokenize, map words to vocabulary slots (resetting the kernel's statistics of recycled slots);
3. ``partial_fit_transform``: learn from the batch and get each article's mixture;
4. publish one output event per good article;
5. flush the producer: every output and dead letter of the batch is acknowledged by the broker;
6. commit the batch's offsets (only now: at least once, never lost);
7. every N batches or T seconds, snapshot model + vocabulary + the offsets they reflect to Redis
   (:mod:`service.checkpoint`).

On start the newest snapshot is restored and partitions are read from the offsets it records, so the model never
contains an article twice and never misses one. SIGTERM/SIGINT finish the batch, snapshot, commit and leave the
group.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition
from numpy.typing import NDArray

from kernels import ALGORITHMS, TopicModel

from .checkpoint import Checkpointer
from .kafka import make_consumer, make_producer
from .metrics import Metrics
from .pipeline import Publisher, TopicLabels, decode_batch, tokenize
from .settings import Settings
from .snapshot import SnapshotStore
from .text import Tokenizer, Vocabulary

__all__ = ["Learner", "StateMismatch"]

log = logging.getLogger(__name__)


class StateMismatch(RuntimeError):
    """The snapshot in Redis was made with settings that contradict the current ones."""


def hellinger_rows(p: NDArray[np.floating], q: NDArray[np.floating], block: int = 8) -> NDArray[np.float64]:
    """Hellinger distance between matching rows of two row-stochastic matrices.

    Works through ``block`` rows at a time so the temporaries stay small next to a K×W matrix.
    """
    out = np.empty(p.shape[0], dtype=np.float64)
    for i in range(0, p.shape[0], block):
        d = np.sqrt(p[i : i + block], dtype=np.float64) - np.sqrt(q[i : i + block], dtype=np.float64)
        out[i : i + block] = np.sqrt(0.5 * np.einsum("ij,ij->i", d, d))
    return out


class Learner:
    """The learning loop. ``run`` blocks until ``stop`` is set (or ``max_batches`` are done)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        store: SnapshotStore | None = None,
    ) -> None:
        self.settings = s = settings
        self.metrics = metrics or Metrics("learner")
        self.store = store or SnapshotStore.from_url(
            s.redis_url, prefix=s.redis_prefix, keep=s.snapshot_keep, ttl_s=s.snapshot_ttl_s
        )
        self.tokenizer = Tokenizer()
        self.offsets: dict[tuple[str, int], int] = {}
        self.version = 0
        self.articles_learned = 0
        self._prev_phi: NDArray[np.float32] | None = None
        self.model, self.vocab = self._restore_or_create()
        log.info("compiling the %s kernel (cached on disk after the first start)", s.algorithm)
        type(self.model).warm_up(**s.kernel_params)
        self.labels = TopicLabels(self.model.topic_word(), self.vocab.slot_words())
        self.metrics.describe_model(s.algorithm, s.topics, s.vocab_size)
        self.consumer = make_consumer(s, s.learner_group(), **(consumer_overrides or {}))
        self.producer = make_producer(s)
        self.publisher = Publisher(self.producer, s, self.metrics)
        self.checkpointer = Checkpointer(
            self.producer, self.publisher.tracker, self.consumer, self._snapshot, s, self.metrics
        )
        self._assigned: set[tuple[str, int]] = set()

    # ------------------------------------------------------------------ state
    def _new_model(self) -> TopicModel:
        s = self.settings
        factory: Callable[..., TopicModel] = ALGORITHMS[s.algorithm]
        return factory(n_topics=s.topics, n_words=s.vocab_size, seed=s.seed, **s.kernel_params)

    def _restore_or_create(self) -> tuple[TopicModel, Vocabulary]:
        s = self.settings
        loaded = self.store.load()
        if loaded is None:
            log.info("no snapshot under prefix %r: starting a fresh %s model", s.redis_prefix, s.algorithm)
            return self._new_model(), Vocabulary(s.vocab_size, admit_count=s.vocab_admit_count)
        meta, payload = loaded
        kstate = payload["kernel"]
        problems = []
        if kstate["algorithm"] != s.algorithm:
            problems.append(f"algorithm {kstate['algorithm']!r} (settings say {s.algorithm!r})")
        if kstate["params"]["n_topics"] != s.topics:
            problems.append(f"{kstate['params']['n_topics']} topics (settings say {s.topics})")
        if kstate["params"]["n_words"] != s.vocab_size:
            problems.append(f"vocabulary of {kstate['params']['n_words']} (settings say {s.vocab_size})")
        if problems:
            raise StateMismatch(
                f"the snapshot under Redis prefix {s.redis_prefix!r} has "
                + ", ".join(problems)
                + "; use another TOPICSTREAM_REDIS_PREFIX to start a new model, or restore the old settings"
            )
        model = ALGORITHMS[s.algorithm].from_state(kstate)
        vocab = Vocabulary.from_state(payload["vocabulary"])
        self.offsets = {(t, int(p)): int(o) for t, p, o in payload["offsets"]}
        self.version = int(meta["version"])
        self.articles_learned = int(payload.get("articles_learned", 0))
        self._prev_phi = model.topic_word().astype(np.float32)
        self.metrics.snapshot_version.set(self.version)
        self.metrics.snapshot_timestamp.set(float(meta["created_at"]))
        log.info(
            "restored snapshot %d (%d articles learned); offsets %s",
            self.version,
            self.articles_learned,
            self.offsets,
        )
        return model, vocab

    def _snapshot(self) -> None:
        """Write model + vocabulary + offsets (called by the checkpointer after outputs are acknowledged)."""
        t0 = time.perf_counter()
        phi = self.model.topic_word()
        self.labels = TopicLabels(phi, self.vocab.slot_words())
        weights = self.model.topic_weights()
        drift = hellinger_rows(phi, self._prev_phi) if self._prev_phi is not None else np.zeros(len(weights))
        self._prev_phi = phi.astype(np.float32)
        del phi  # K×W doubles: not needed while the state is packed (the snapshot is the memory peak)
        payload = {
            "kernel": self.model.state_dict(),
            "vocabulary": self.vocab.state_dict(),
            "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
            "articles_learned": self.articles_learned,
        }
        meta = {
            "algorithm": self.settings.algorithm,
            "topics": self.settings.topics,
            "articles_learned": self.articles_learned,
        }
        info = self.store.save(payload, meta)
        self.version = info.version
        model_drift = float(np.dot(weights, drift))
        self.store.put_summary(
            {
                "version": info.version,
                "algorithm": self.settings.algorithm,
                "created_at": info.created_at,
                "articles_learned": self.articles_learned,
                "topics_used": self.model.topics_used(),
                "model_drift": model_drift,
                "topics": [
                    {
                        "topic": k,
                        "prevalence": float(weights[k]),
                        "drift": float(drift[k]),
                        "top_words": self.labels.top_words[k],
                    }
                    for k in range(len(weights))
                ],
            }
        )
        m = self.metrics
        m.snapshot_duration.observe(time.perf_counter() - t0)
        m.snapshot_size.set(info.size_bytes)
        m.snapshot_version.set(info.version)
        m.snapshot_timestamp.set(info.created_at)
        m.model_drift.set(model_drift)
        for k, d in enumerate(drift):
            m.topic_drift.labels(topic=str(k)).set(float(d))
        log.info(
            "snapshot %d: %.1f MB, %d articles learned",
            info.version,
            info.size_bytes / 1e6,
            self.articles_learned,
        )

    # ------------------------------------------------------------------ partitions
    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # The snapshot is the only record of what the model has learned: a partition it does not mention has
        # contributed nothing yet and is read from its beginning. (Kafka's committed offsets may be ahead of the
        # snapshot — they are for monitoring — and resuming there would lose articles.)
        for tp in partitions:
            tp.offset = self.offsets.get((tp.topic, tp.partition), OFFSET_BEGINNING)
            self._assigned.add((tp.topic, tp.partition))
        log.info("assigned %s", [(tp.topic, tp.partition, tp.offset) for tp in partitions])
        consumer.incremental_assign(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Batches are processed synchronously, so everything consumed so far is already acknowledged and
        # committed when this callback runs.
        for tp in partitions:
            self._assigned.discard((tp.topic, tp.partition))
        log.info("revoked %s", [(tp.topic, tp.partition) for tp in partitions])
        consumer.incremental_unassign(partitions)

    def _update_lag(self) -> None:
        """Lag per assigned partition: the high watermark (cached from fetch responses, no broker round trip)
        minus our position. (Tansu reports a wrong high watermark; real Kafka is right.)"""
        for topic, part in list(self._assigned):
            pos = self.offsets.get((topic, part))
            if pos is None:
                continue
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            except Exception:  # a transient metadata error must not stop learning
                self.metrics.errors.labels(kind="watermarks").inc()
                continue
            if high >= 0:
                self.metrics.lag.labels(topic=topic, partition=str(part)).set(max(0, high - pos))

    # ------------------------------------------------------------------ the loop
    def process(self, msgs: list[Message]) -> None:
        """Steps 1–6 for one batch of messages."""
        s, m = self.settings, self.metrics
        t0 = time.perf_counter()
        decoded = decode_batch(msgs, s.max_article_bytes)
        for msg, rejection in decoded.bad:
            self.publisher.dead_letter(msg, rejection)
        t1 = time.perf_counter()
        articles = [a for _, a in decoded.good]
        encoded = self.vocab.encode(tokenize(self.tokenizer, articles))
        if encoded.recycled.size:
            self.model.reset_words(encoded.recycled)
            m.vocabulary_recycled.inc(int(encoded.recycled.size))
        t2 = time.perf_counter()
        theta = self.model.partial_fit_transform(encoded.batch) if articles else np.zeros((0, s.topics))
        t3 = time.perf_counter()
        batch = encoded.batch
        tokens = batch.doc_tokens()
        if s.learner_publish:
            self.publisher.publish(decoded.good, theta, tokens, self.labels, s.algorithm, self.version)
        self.articles_learned += len(articles)
        t4 = time.perf_counter()
        self.checkpointer.after_batch(msgs, self.offsets)
        t5 = time.perf_counter()

        m.consumed.inc(len(msgs))
        m.batches.inc()
        m.tokens.inc(float(batch.counts.sum()))
        m.oov_tokens.inc(encoded.oov_tokens)
        m.vocabulary_words.set(len(self.vocab))
        for stage, dt in (
            ("decode", t1 - t0),
            ("tokenize", t2 - t1),
            ("kernel", t3 - t2),
            ("publish", t4 - t3),
            ("commit", t5 - t4),
        ):
            m.batch_duration.labels(stage=stage).observe(dt)
        weights = self.model.topic_weights()
        for k, w in enumerate(weights):
            m.topic_prevalence.labels(topic=str(k)).set(float(w))
        m.topics_used.set(self.model.topics_used())
        for name, value in self.model.diagnostics().items():
            m.kernel_stat.labels(stat=name).set(value)

    def run(self, stop: threading.Event | None = None, max_batches: int | None = None) -> None:
        """Consume until ``stop`` is set; then finish the batch, snapshot, commit and leave the group."""
        stop = stop or threading.Event()
        s = self.settings
        self.consumer.subscribe(
            [s.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        batches = 0
        try:
            while not stop.is_set() and (max_batches is None or batches < max_batches):
                msgs = self.consumer.consume(num_messages=s.batch_size, timeout=s.batch_timeout_s)
                good_msgs = []
                for msg in msgs:
                    err = msg.error()
                    if err is None:
                        good_msgs.append(msg)
                    else:
                        self.metrics.errors.labels(kind="consume").inc()
                        log.warning("consumer error: %s", err)
                if good_msgs:
                    self.process(good_msgs)
                    self._update_lag()
                    batches += 1
                else:
                    self.checkpointer.maybe_snapshot()
        finally:
            self.close()

    def close(self) -> None:
        """Final snapshot and commit, then leave the consumer group."""
        try:
            self.checkpointer.final()
        finally:
            self.consumer.close()
