"""Checkpointing: flush the producer → commit offsets → (now and then) snapshot the state with its offsets.

The order is what makes the delivery guarantee hold:

* offsets are committed only after every output and dead letter of their messages is acknowledged, so a crash
  can duplicate outputs but never lose one;
* a snapshot records the offsets of exactly the messages its state has learned from, and the learner resumes
  from the snapshot's offsets (not Kafka's committed ones), so no article is learned twice or missed;
* if a delivery fails, the in-memory model has learned a batch whose outputs are not safe: no snapshot is taken
  any more and the process stops; on restart the batch is learned again from the last good snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from .kafka import DeliveryError, DeliveryTracker, flush_all, next_offsets
from .metrics import Metrics
from .settings import Settings

__all__ = ["Checkpointer"]

log = logging.getLogger(__name__)


class Checkpointer:
    """Runs the end-of-batch sequence for the learner (replicas use ``snapshot=None``: commit only)."""

    def __init__(
        self,
        producer: Producer,
        tracker: DeliveryTracker,
        consumer: Consumer,
        snapshot: Callable[[], None] | None,
        settings: Settings,
        metrics: Metrics,
    ) -> None:
        self.producer = producer
        self.tracker = tracker
        self.consumer = consumer
        self.snapshot = snapshot
        self.every_batches = settings.snapshot_every_batches
        self.every_s = settings.snapshot_every_s
        self.metrics = metrics
        self.batches_since_snapshot = 0
        self.last_snapshot = time.monotonic()
        self.broken = False

    def after_batch(self, msgs: list[Message], offsets: dict[tuple[str, int], int]) -> None:
        """Flush, then commit the batch's offsets (updating ``offsets`` in place), then snapshot if due."""
        try:
            flush_all(self.producer, self.tracker)
        except DeliveryError:
            self.broken = True
            raise
        nxt = next_offsets(msgs)
        offsets.update(nxt)
        self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(nxt.items())], asynchronous=False)
        self.batches_since_snapshot += 1
        self.maybe_snapshot()

    def maybe_snapshot(self) -> None:
        """Snapshot when N batches or T seconds have passed since the last one (and something changed)."""
        if self.snapshot is None or self.batches_since_snapshot == 0:
            return
        due_time = time.monotonic() - self.last_snapshot >= self.every_s
        if self.batches_since_snapshot >= self.every_batches or due_time:
            self._take()

    def _take(self) -> None:
        assert self.snapshot is not None
        try:
            self.snapshot()
        except Exception:
            # Redis down or slow: keep learning; the offsets stay committed, the next attempt retries.
            self.metrics.snapshot_failures.inc()
            log.exception("snapshot failed; will retry")
            return
        self.batches_since_snapshot = 0
        self.last_snapshot = time.monotonic()

    def final(self) -> None:
        """On shutdown: flush and snapshot what is safe to snapshot."""
        if self.broken:
            log.error("a delivery failed: not snapshotting a model whose outputs are not acknowledged")
            return
        try:
            flush_all(self.producer, self.tracker)
        except DeliveryError:
            log.exception("final flush failed: no final snapshot")
            return
        if self.snapshot is not None and self.batches_since_snapshot:
            self._take()
