"""``topicstream run``: the learner. One process, one writer of the model.

The batch loop is :class:`service.worker.BatchWorker`'s; the learner supplies what is its own:

* bad messages go to the dead-letter topic with the reason;
* words are mapped to vocabulary slots, learning new words (recycled slots are reset in the kernel first);
* the kernel learns from the batch and returns each article's mixture (``partial_fit_transform``);
* now and then (every N batches or T seconds) a snapshot of model + vocabulary + the offsets they reflect is
  written to Redis off the batch loop (:mod:`service.checkpoint`).

On start the newest snapshot is restored (settings that changed are applied where the kernel allows it, or refused
with one line: :func:`service.compat.restore_plan`) and partitions are read from the offsets it records, so the
model never contains an article twice and never misses one. SIGTERM/SIGINT finish the batch in flight, publish
and flush it, write a final snapshot, commit and leave the group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Message
from numpy.typing import NDArray

from kernels import TopicModel
from kernels.registry import kernel_class

from .checkpoint import Capture, SnapshotWriter, hellinger_rows
from .compat import restore_plan
from .metrics import Metrics
from .pipeline import TopicLabels
from .schemas import Rejection
from .settings import Settings
from .snapshot import SnapshotInfo, SnapshotStore
from .text import Vocabulary
from .worker import BatchWorker, InFlight, ModelRef

__all__ = ["Learner", "StateMismatch", "hellinger_rows"]

log = logging.getLogger(__name__)


class StateMismatch(RuntimeError):
    """The snapshot in Redis was made with settings that contradict the current ones."""


class Learner(BatchWorker):
    """The learning loop. ``run`` blocks until ``stop`` is set."""

    role = "learner"

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        store: SnapshotStore | None = None,
    ) -> None:
        s = settings
        self.store = store or SnapshotStore.from_url(
            s.redis_url, prefix=s.redis_prefix, keep=s.snapshot_keep, ttl_s=s.snapshot_ttl_s
        )
        super().__init__(s, metrics or Metrics("learner"), s.learner_group(), consumer_overrides)
        self.version = 0
        self.articles_learned = 0
        self.model, self.vocab = self._restore_or_create()
        log.info("compiling the %s kernel (cached on disk after the first start)", s.algorithm)
        type(self.model).warm_up(**s.kernel_params)
        self.labels = TopicLabels(self.model.topic_word(), self.vocab.slot_words())
        self.metrics.describe_model(s.algorithm, s.topics, s.vocab_size)
        self.writer = SnapshotWriter(self.store, self.metrics, self.wait_acknowledged, self._written)
        self._batches_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self._last_gauges = 0.0

    # ------------------------------------------------------------------ state
    def _restore_or_create(self) -> tuple[TopicModel, Vocabulary]:
        s = self.settings
        loaded = self.store.load()
        if loaded is None:
            log.info("no snapshot under prefix %r: starting a fresh %s model", s.redis_prefix, s.algorithm)
            factory: Callable[..., TopicModel] = kernel_class(s.algorithm)
            model = factory(n_topics=s.topics, n_words=s.vocab_size, seed=s.seed, **s.kernel_params)
            return model, Vocabulary(s.vocab_size, admit_count=s.vocab_admit_count)
        meta, payload = loaded
        plan = restore_plan(s, payload)
        if plan.refused:
            raise StateMismatch(
                f"the snapshot under Redis prefix {s.redis_prefix!r} does not match the settings:\n  "
                + "\n  ".join(plan.refused)
            )
        model = kernel_class(s.algorithm).from_state(payload["kernel"])
        vocab = Vocabulary.from_state(payload["vocabulary"])
        plan.apply_to(model, vocab)
        for line in plan.applied:
            log.info("%s", line)
        self.positions = {(t, int(p)): int(o) for t, p, o in payload["offsets"]}
        self.version = int(meta["version"])
        self.articles_learned = int(payload.get("articles_learned", 0))
        self.metrics.snapshot_version.set(self.version)
        self.metrics.snapshot_timestamp.set(float(meta["created_at"]))
        log.info(
            "restored snapshot %d (%d articles learned); offsets %s",
            self.version,
            self.articles_learned,
            self.positions,
        )
        return model, vocab

    # ------------------------------------------------------------------ the worker's hooks
    def start_offset(self, topic: str, partition: int) -> int:
        # The snapshot is the only record of what the model has learned: a partition it does not mention has
        # contributed nothing yet and is read from its beginning. (Kafka's committed offsets may be ahead of the
        # snapshot — they are for monitoring — and resuming there would lose articles.)
        return self.positions.get((topic, partition), OFFSET_BEGINNING)

    @property
    def publishes(self) -> bool:
        return self.settings.learner_publish

    def reject(self, msg: Message, rejection: Rejection, batch: InFlight) -> None:
        self.publisher.dead_letter(msg, rejection, batch.tracker)

    def encode(self, batch: InFlight, bags: list[Any]) -> None:
        batch.encoded = self.vocab.encode(bags)
        batch.model = ModelRef(self.labels, self.settings.algorithm, self.version, self.settings.topics)
        self.articles_learned += len(batch.decoded.good)

    def compute(self, batch: InFlight) -> NDArray[np.float64]:
        assert batch.encoded is not None
        recycled = batch.encoded.recycled
        if recycled.size:
            self.model.reset_words(recycled)
            self.metrics.vocabulary_recycled.inc(int(recycled.size))
        if not batch.decoded.good:
            return np.zeros((0, self.settings.topics))
        return self.model.partial_fit_transform(batch.encoded.batch)

    def between_batches(self, finished: InFlight | None) -> None:
        if finished is not None:
            self._batches_since_snapshot += 1
            now = time.monotonic()
            if now - self._last_gauges >= 1.0:  # K gauges: at most once a second
                self._last_gauges = now
                self._model_gauges()
        if self._snapshot_due() and self.writer.ready() and not self.broken:
            self._take_snapshot()

    # ------------------------------------------------------------------ snapshots
    def _snapshot_due(self) -> bool:
        s = self.settings
        if self._batches_since_snapshot == 0:
            return False
        return (
            self._batches_since_snapshot >= s.snapshot_every_batches
            or time.monotonic() - self._last_snapshot >= s.snapshot_every_s
        )

    def _take_snapshot(self) -> None:
        """Capture on the kernel lane (it is idle now: called between batches) and hand it to the writer."""
        s = self.settings
        t0 = time.perf_counter()
        vocab_state = self.vocab.state_dict()
        slot_words = self.vocab.slot_words()
        offsets = dict(self.positions)
        extra = {"articles_learned": self.articles_learned}
        meta = {"algorithm": s.algorithm, "topics": s.topics, "articles_learned": self.articles_learned}
        future = self.lane.submit(
            self.writer.capture, self._seq, self.model, vocab_state, slot_words, offsets, extra, meta
        )
        self.writer.submit(future)
        self._batches_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        self.metrics.batch_duration.labels(stage="snapshot").observe(time.perf_counter() - t0)

    def _written(self, cap: Capture, info: SnapshotInfo) -> None:
        """After a snapshot is in Redis (writer thread): labels, summary, metrics."""
        self.labels = cap.labels
        self.version = info.version
        model_drift = float(np.dot(cap.weights, cap.drift))
        self.store.put_summary(
            {
                "version": info.version,
                "algorithm": self.settings.algorithm,
                "created_at": info.created_at,
                "articles_learned": cap.meta["articles_learned"],
                "topics_used": cap.topics_used,
                "model_drift": model_drift,
                "topics": [
                    {
                        "topic": k,
                        "prevalence": float(cap.weights[k]),
                        "drift": float(cap.drift[k]),
                        "top_words": cap.labels.top_words[k],
                    }
                    for k in range(len(cap.weights))
                ],
            }
        )
        m = self.metrics
        m.snapshot_size.set(info.size_bytes)
        m.snapshot_version.set(info.version)
        m.snapshot_timestamp.set(info.created_at)
        m.model_drift.set(model_drift)
        for k, d in enumerate(cap.drift):
            m.topic_drift.labels(topic=str(k)).set(float(d))
        log.info(
            "snapshot %d: %.1f MB, %d articles learned",
            info.version,
            info.size_bytes / 1e6,
            cap.meta["articles_learned"],
        )

    def _model_gauges(self) -> None:
        m = self.metrics
        for k, w in enumerate(self.model.topic_weights()):
            m.topic_prevalence.labels(topic=str(k)).set(float(w))
        m.topics_used.set(self.model.topics_used())
        m.vocabulary_words.set(len(self.vocab))
        for name, value in self.model.diagnostics().items():
            m.kernel_stat.labels(stat=name).set(value)

    def checkpoint(self) -> None:
        """Publish and flush what is in flight, then write a snapshot of everything learned and wait for it."""
        self.flush()
        self.writer.wait_idle()
        if self._batches_since_snapshot and not self.broken:
            self._take_snapshot()
            self.writer.wait_idle()

    def close(self) -> None:
        """Publish and flush what is in flight, write a final snapshot, commit, leave the group."""
        try:
            if not self.broken:
                self.checkpoint()
            else:
                log.error("a delivery failed: not snapshotting a model whose outputs are not acknowledged")
        finally:
            self.writer.close()
            self.lane.shutdown(wait=True)
            self.consumer.close()

    def abandon(self) -> None:
        super().abandon()
        self.writer.close(timeout=30)
