"""Staying in the consumer group while the batch loop waits (for the kernel lane, for the broker's acknowledgements).

librdkafka leaves the group when the application has not polled for ``max.poll.interval.ms``, and its partitions
are lost until it rejoins. A wait longer than a fraction of that interval therefore pauses the assigned
partitions (a paused partition yields no message; librdkafka fetches what it had prefetched again after
``resume``) and polls meanwhile. :class:`GroupKeepAlive` holds those waits for :class:`service.worker.BatchWorker`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from concurrent.futures import Future, wait
from typing import Any

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
