"""Staying in the consumer group while the batch loop waits: for the kernel lane, for the broker's acknowledgements
(backpressure), for a snapshot that changes topic ids.

librdkafka leaves the group when the application has not polled for ``max.poll.interval.ms``, and its partitions
are lost until it rejoins. A wait longer than a fraction of that interval therefore pauses the assigned
partitions (a paused partition yields no message; librdkafka fetches what it had prefetched again after
``resume``) and polls meanwhile. :class:`GroupKeepAlive` holds those waits for :class:`service.worker.BatchWorker`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from .kafka import partition_of
from .metrics import Metrics
from .settings import Settings

__all__ = ["GroupKeepAlive"]

log = logging.getLogger(__name__)


class GroupKeepAlive:
    """The worker's waits that poll the consumer with its partitions paused (a mix-in of
    :class:`service.worker.BatchWorker`, which sets these attributes)."""

    settings: Settings
    metrics: Metrics
    consumer: Any
    assigned: set[tuple[str, int]]
    #: Messages a keep-alive poll returned; the next batch takes them first.
    _early: list[Message]
    #: A consumer poll is on the stack (the keep-alive loop, or a rebalance callback run by a poll): a drain then
    #: waits without polling again.
    _inside_poll: bool
    producer: Any
    broken: bool
    _stop: threading.Event
    _unacked: deque[Any]
    _held_logged_at: float

    if TYPE_CHECKING:  # supplied by BatchWorker

        def _commit_acknowledged(self, wait: bool = False) -> None: ...

        def must_stop(self) -> bool: ...

    @contextlib.contextmanager
    def _inside_a_poll(self) -> Iterator[None]:
        """Mark a consumer poll as on the stack (a rebalance callback, the keep-alive loop): a drain meanwhile must
        not poll again."""
        outer, self._inside_poll = self._inside_poll, True
        try:
            yield
        finally:
            self._inside_poll = outer

    def _keep_alive_until(self, done: Future[Any]) -> None:
        """Wait for the kernel lane; if it is still busy after a third of ``max.poll.interval.ms`` (the particle
        filter's Gibbs refinements take seconds), pause the assigned partitions and poll until it is done, then
        resume them. Polling is what tells the consumer the application is alive: without it, librdkafka leaves
        the group once the interval has passed, and the partitions are lost until it rejoins. A paused partition
        yields no message (librdkafka drops what it had prefetched and fetches it again after ``resume``). A
        partition assigned during the wait yields one message, which is kept for the next batch, and is paused
        too, so what waits in ``_early`` stays small; every partition paused here is resumed at the end, also one
        revoked meanwhile (:meth:`_unassign` resumes it as well)."""
        third = self.settings.max_poll_interval_ms / 3000
        if wait([done], timeout=third).done:
            return
        with self._paused() as paused, self._inside_a_poll():
            while not done.done():
                self._poll_paused(paused, min(third, 0.5))

    @contextlib.contextmanager
    def _paused(self) -> Iterator[set[tuple[str, int]]]:
        """Pause the assigned partitions for the block; yields the set of paused ones (:meth:`_poll_paused` adds
        partitions assigned meanwhile), every one resumed at the end, also one revoked meanwhile."""
        paused = set(self.assigned)
        try:
            self.consumer.pause([TopicPartition(t, p) for t, p in sorted(paused)])
            yield paused
        finally:
            with contextlib.suppress(KafkaException):
                self.consumer.resume([TopicPartition(t, p) for t, p in sorted(paused)])

    def _poll_paused(self, paused: set[tuple[str, int]], timeout: float) -> None:
        """One consumer poll while the partitions are paused: it keeps the consumer in its group and runs rebalance
        callbacks. A message from a partition assigned meanwhile is kept for the next batch, its partition paused
        (librdkafka resumes a newly assigned partition: also one revoked and assigned again during the wait)."""
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                self.metrics.errors.labels(kind="consume").inc()
                log.warning("consumer error: %s", err)
            return
        key = partition_of(msg)
        if key in self.assigned:
            self._early.append(msg)
        paused.add(key)
        self.consumer.pause([TopicPartition(*key)])

    def _hold_until_acknowledged(self) -> None:
        """Backpressure: while ``max_unacked_batches`` published batches wait for the broker's acknowledgements
        (an output topic whose partitions lost their leader, ``acks=all`` short of in-sync replicas), read no
        more input, so memory holds at most that many batches' offsets (one more: the batch the kernel is on)
        and the producer's queue; stay in the group meanwhile. Returns when some are acknowledged, a delivery
        failed, or the worker is told to stop (or must: :meth:`must_stop`)."""
        limit = self.settings.max_unacked_batches
        if len(self._unacked) < limit:
            return
        now = time.monotonic()
        if now - self._held_logged_at >= 60:  # slow acknowledgements can start a wait at every turn
            self._held_logged_at = now
            log.warning(
                "%d published batches await the broker's acknowledgements: reading no input until some do",
                len(self._unacked),
            )
        self._hold_while(lambda: len(self._unacked) >= limit)

    def _hold_while(self, holding: Callable[[], bool]) -> None:
        """Hand nothing more to the kernel lane while ``holding()``: the partitions are paused and the consumer
        polled (it stays in its group), acknowledgements are received and committed, the heartbeat turns. Ends
        early when a delivery failed or the worker is told to stop (or must: :meth:`must_stop`)."""
        if not holding():
            return
        third = self.settings.max_poll_interval_ms / 3000
        with self._paused() as paused, self._inside_a_poll():
            while holding() and not (self.broken or self._stop.is_set() or self.must_stop()):
                self.producer.poll(min(third, 0.2))
                self._commit_acknowledged()
                self._poll_paused(paused, 0)
                self.metrics.unacked_batches.set(len(self._unacked))
                self.metrics.beat()
