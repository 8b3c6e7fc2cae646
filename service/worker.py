"""The one batch loop that the learner and the replicas share.

A :class:`BatchWorker` consumes a batch, decodes it (bad messages: :meth:`BatchWorker.reject`), tokenizes it
(polars, which also releases the GIL) and hands it to its *kernel lane*: one thread that runs the kernel (numba
releases the GIL, so it runs on the second core) and publishes the mixtures the moment they exist, so an
article's answer never waits for the next batch to arrive. Three batches are in flight at once::

    main thread:  consume n+1 · decode · tokenize │ wait n │ between_batches │ encode n+1 ─► lane │ consume n+2 ···
    kernel lane:  ──── kernel(n) · publish(n) ────┘                                             kernel(n+1) ···
    producer:     ··· acknowledgements of n-1, n-2 … arrive; their offsets are committed in order

Subclasses say only what differs: :meth:`encode` and :meth:`compute` (learn and infer, or infer only),
:meth:`start_offset` (where a newly assigned partition is read from), :meth:`between_batches` (snapshot writer or
snapshot follower), :meth:`reject`, their consumer group and snapshot store (:meth:`consumer_group`,
:meth:`open_store`) and, for the learner, when it must stop on its own (:meth:`must_stop`, :meth:`after_run`).

A kernel call that outlasts a third of ``max.poll.interval.ms`` does not cost the consumer its group: the main
thread pauses the partitions and polls while it waits (:mod:`service.keepalive`). Nor does a broker that stops
acknowledging outputs cost memory: at ``max_unacked_batches`` published batches awaiting acknowledgements the
worker reads no more input until some are acknowledged, and a published batch keeps only its offsets and its
delivery tracker (:meth:`BatchWorker._hold_until_acknowledged`).

Delivery guarantee (at least once, never lost): a batch's offsets are committed only when the broker has
acknowledged every output and dead letter of *that* batch and of every batch before it. Commits between batches
are asynchronous (``flush``, on close and at a checkpoint, commits and waits; a revocation waits for the
acknowledgements a bounded time, :meth:`BatchWorker._settle`), and a failed commit
is only counted: the learner's positions come from its snapshot, and a replica that restarts
behind its committed offsets publishes duplicates, never gaps. A delivery that fails for good stops the worker
(:class:`~service.kafka.DeliveryError`) before anything later is committed.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypedDict

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from numpy.typing import NDArray

from kernels import Batch

from .group_stall import GroupStallWatch
from .inflight import InFlight
from .kafka import (
    DeliveryError,
    flush_all,
    make_consumer,
    make_producer,
    next_offsets,
    partition_of,
    producer_max_bytes,
    size_limit,
)
from .keepalive import GroupKeepAlive
from .keys import check_types
from .metrics import Metrics
from .pipeline import Publisher, decode_batch, tokenize
from .refusals import remember, remembered
from .schemas import Rejection
from .settings import Settings
from .snapshot import SnapshotStore
from .text import FlatBags

__all__ = ["PIECE_TOKENS", "BatchWorker", "WorkerParts", "pieces"]

log = logging.getLogger(__name__)

#: Most tokens handed to a kernel in one call. A batch of more (long articles, or a flood of huge ones) goes in
#: pieces of whole articles, the loop's heartbeat set after each: the particle filter learns ~25,000 tokens/s on
#: one core, so a batch of 500 articles of 100 kB (~7 M tokens) in one call would outlast ``/healthz``'s 300 s
#: and be restarted as stalled, at every start again. A batch of 500 news articles (~300,000 tokens) is one call.
PIECE_TOKENS = 1_000_000


def pieces(doc_tokens: NDArray[np.float64], budget: float) -> list[tuple[int, int]]:
    """Consecutive ranges ``(start, stop)`` of the documents, each of at most ``budget`` tokens, or one document
    that alone has more.

    >>> pieces(np.array([3.0, 3.0, 5.0, 1.0]), 6)
    [(0, 2), (2, 4)]
    >>> pieces(np.array([9.0, 1.0]), 6)
    [(0, 1), (1, 2)]
    """
    bounds, start, total = [], 0, 0.0
    for d, n in enumerate(doc_tokens.tolist()):
        if d > start and total + n > budget:
            bounds.append((start, d))
            start, total = d, 0.0
        total += n
    bounds.append((start, len(doc_tokens)))
    return bounds


class WorkerParts(TypedDict, total=False):
    """What a caller (the CLI, a test) may hand a worker instead of what it makes itself: its metrics (default:
    ``Metrics(role)``), extra consumer settings, and its snapshot store (default: :meth:`BatchWorker.open_store`).
    The learner and the replica take them as ``**parts``."""

    metrics: Metrics
    consumer_overrides: dict[str, Any]
    store: SnapshotStore


class BatchWorker(GroupKeepAlive, abc.ABC):
    """Consume → decode → tokenize → kernel → publish → commit, pipelined (see the module docstring)."""

    role = "worker"
    #: :data:`PIECE_TOKENS`, per worker (tests make it small).
    piece_tokens: float = PIECE_TOKENS

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        store: SnapshotStore | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics(self.role)
        self.store = store or self.open_store()  # before the consumer: an unreachable Redis fails first
        check_types(self.store.r, settings.redis_prefix)  # and a key another program wrote is named (the lease's too)
        self.tokenizer = settings.tokenizer()
        group_id = self.consumer_group()
        self.consumer = make_consumer(settings, group_id, on_commit=self._on_commit, **(consumer_overrides or {}))
        limit = size_limit(settings, self.produced_topics(), refused=remembered(self.store.r, settings.redis_prefix))
        #: The producer's ``message.max.bytes``: the largest batch it sends (:mod:`service.refusals`).
        self.message_max_bytes = limit.get("message.max.bytes", producer_max_bytes(settings))
        self.producer = make_producer(settings, **limit)
        self.publisher = Publisher(self.producer, settings, self.metrics)
        self.lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.role}-kernel")
        #: Next offset to read per (topic, partition), as far as batches have been handed to the kernel.
        self.positions: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self._seq = 0
        self.submitted_seq = 0  # the newest batch handed to the kernel lane
        self._inflight: InFlight | None = None  # handed to the kernel lane, not yet published
        self._unacked: deque[InFlight] = deque()  # published, in order, awaiting the broker's acknowledgements
        self._acked_seq = 0  # every batch up to this one is acknowledged by the broker
        self._acked = threading.Condition()
        self.broken = False  # a delivery or a kernel call failed: nothing after it may be committed or snapshotted
        self._last_consume = 0.0  # when the previous batch was taken (time.monotonic)
        #: A consumer poll is on the stack (the keep-alive loop, or a rebalance callback run by a poll): a drain
        #: then waits without polling again.
        self._inside_poll = False
        self._early: list[Message] = []  # messages a keep-alive poll returned; the next batch takes them first
        #: Partitions given up (revoked or lost) since the current batch was consumed: a keep-alive poll in
        #: :meth:`drain` can run a rebalance between consuming a batch and handing it to the kernel lane.
        self._given_up: set[tuple[str, int]] = set()
        self._stop = threading.Event()  # :meth:`run`'s stop: ends a wait for acknowledgements too
        self._held_logged_at = -float("inf")  # when a wait for acknowledgements was last logged
        self.metrics.unacked_limit.set(settings.max_unacked_batches)
        #: A wait for an assignment longer than twice the longest rebalance (:mod:`service.group_stall`): after a
        #: lost session the member rejoins only once the brokers answer again, and Tansu then took another
        #: max.poll.interval.ms + session.timeout.ms and a second (a helper's probe: a 4 s broker pause, assigned
        #: 8.7 s after the loss against 6 s at the tests' timeouts, and the error said a stall that was not one).
        self.group_stall = GroupStallWatch(
            self.role,
            group_id,
            settings.input_topic,
            self.metrics,
            2 * (settings.max_poll_interval_ms + settings.session_timeout_ms) / 1000,
        )

    # ------------------------------------------------------------------ what subclasses supply
    def produced_topics(self) -> list[str]:
        """The topics this worker produces to (the producer keeps within the smallest one's size limit)."""
        return [self.settings.output_topic, self.settings.dlq_topic]

    @abc.abstractmethod
    def consumer_group(self) -> str:
        """The consumer group this worker reads the input topic in."""

    @abc.abstractmethod
    def open_store(self) -> SnapshotStore:
        """The snapshot store to write to or follow, when none was handed in (``self.settings`` is set)."""

    @abc.abstractmethod
    def start_offset(self, topic: str, partition: int) -> int | None:
        """Where to read a newly assigned partition from; None keeps the group's committed offset."""

    @abc.abstractmethod
    def encode(self, batch: InFlight, bags: FlatBags) -> None:
        """Set ``batch.encoded`` (word ids) and ``batch.model`` (main thread, between two kernel calls)."""

    @abc.abstractmethod
    def compute(self, batch: InFlight) -> NDArray[np.float64]:
        """The mixtures of ``batch``'s good articles (runs on the kernel lane, one batch at a time)."""

    def in_pieces(self, batch: Batch, call: Callable[[Batch], NDArray[np.float64]]) -> NDArray[np.float64]:
        """``call(batch)`` (a kernel's mixtures), in :func:`pieces` of at most ``piece_tokens`` tokens with the
        loop's heartbeat set after each: a kernel working through a huge batch is busy, not stalled."""
        if batch.n_tokens <= self.piece_tokens:  # nearly every batch: one sum, no per-document counts
            return call(batch)
        ranges = pieces(batch.doc_tokens(), self.piece_tokens)
        out = []
        for start, stop in ranges:
            out.append(call(batch.slice(start, stop)))
            self.metrics.beat()
        return np.vstack(out)

    @abc.abstractmethod
    def reject(self, msg: Message, rejection: Rejection, batch: InFlight) -> None:
        """A message that is not a valid article."""

    def between_batches(self, finished: InFlight | None) -> None:
        """Called on the main thread after the kernel lane finished ``finished`` and before the next batch is
        handed to it: the one moment the model, the vocabulary and :attr:`positions` describe the same point."""

    @property
    def publishes(self) -> bool:
        return True

    def must_stop(self) -> bool:
        """True when the worker must stop on its own (the learner: another learner took over); checked before
        every turn of :meth:`run`."""
        return False

    def must_hold(self) -> bool:
        """True while the next batch must not be handed to the kernel lane yet (the learner: a snapshot whose
        topic-hygiene moves changed topic ids is being written, so no output may carry the new ids before Redis
        and the lineage do); checked after every drain, and the loop waits in the group meanwhile."""
        return False

    def after_run(self) -> None:
        """Called when :meth:`run` has closed the worker without an error (the learner reports a lost lease)."""

    # ------------------------------------------------------------------ partitions
    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            start = self.start_offset(tp.topic, tp.partition)
            if start is not None:
                tp.offset = start
            self.assigned.add((tp.topic, tp.partition))
        log.info("assigned %s", [(tp.topic, tp.partition, tp.offset) for tp in partitions])
        consumer.incremental_assign(partitions)
        self.group_stall.assigned()

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Finish what is in flight so its offsets are committed before another member takes over; but a broker that
        # does not acknowledge outputs (a partition short of in-sync replicas) must not hold the rebalance, and this
        # poll, for ever: after a third of max.poll.interval.ms (5 s at least: a loaded broker acknowledges within
        # that, and a shorter wait would make duplicates of a healthy handover) what is acknowledged is committed
        # and the partitions go. Their next owner reads the rest again (at least once); its outputs still go out.
        with self._inside_a_poll():  # the poll that runs this callback
            if not self.broken:
                self._settle(max(5.0, self.settings.max_poll_interval_ms / 3000))
        self._unassign(consumer, partitions)

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # The group session expired (e.g. the broker was away): commits would be refused. The batch in flight is
        # still published; positions are re-established on the next assignment.
        self.metrics.errors.labels(kind="partitions_lost").inc()
        log.warning("partitions lost (group session expired): %s", [(tp.topic, tp.partition) for tp in partitions])
        with self._inside_a_poll():  # the poll that runs this callback
            if not self.broken:
                self.drain()
        self._unassign(consumer, partitions)

    def _unassign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        for key in gone:
            self.assigned.discard(key)
            with contextlib.suppress(KeyError):  # a partition we never reported lag for
                self.metrics.lag.remove(key[0], str(key[1]))
        if not self.assigned:
            self.group_stall.unassigned()
        self._given_up |= gone
        # Batches still awaiting acknowledgements (a revocation that stopped waiting, a lost session) must not commit
        # these partitions' offsets when acknowledged later: they are another member's now, further on, maybe.
        for waiting in self._unacked:
            waiting.next_offsets = {k: o for k, o in waiting.next_offsets.items() if k not in gone}
        # Unread messages of these partitions are the next owner's (read again from the committed offset or, if
        # they come back here, from :meth:`start_offset`): dropped, uncommitted.
        self._early = [m for m in self._early if partition_of(m) not in gone]
        log.info("revoked %s", [(tp.topic, tp.partition) for tp in partitions])
        # librdkafka keeps a partition's pause across unassign and assign: one paused by a keep-alive would come
        # back paused and never be read again.
        with contextlib.suppress(KafkaException):
            consumer.resume(partitions)
        consumer.incremental_unassign(partitions)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None:
            self.metrics.errors.labels(kind="commit").inc()
            log.warning("offset commit failed (counted; positions are safe elsewhere): %s", err)

    # ------------------------------------------------------------------ the pipeline
    def _consume(self, timeout: float, limit: int | None = None) -> list[Message]:
        """The next batch: up to ``batch_size`` messages, taken ``timeout`` after the previous batch at the latest.

        The wait counts from when the previous batch was taken, not from now: when preparing and handing over
        that batch took longer than ``timeout`` (a fast stream), what has arrived meanwhile is taken after a
        fifth of the timeout at most, so a batch never waits a full timeout on top of the work (at 3,000
        articles/s that extra wait capped the learner below the rate). An idle stream, once the timeout since the
        previous batch has passed, waits a fifth of it and then a full timeout more before it returns nothing."""
        n = self.settings.batch_size if limit is None else min(limit, self.settings.batch_size)
        msgs, self._early = self._early[:n], self._early[n:]  # what a keep-alive poll returned comes first
        left = self._last_consume + timeout - time.monotonic()
        if len(msgs) < n:  # a fifth of the timeout at least: a fetch that is arriving completes the batch
            msgs += self.consumer.consume(num_messages=n - len(msgs), timeout=max(left, timeout / 5))
        if not msgs and left <= 0:
            msgs = self.consumer.consume(num_messages=n, timeout=timeout)
        self._last_consume = time.monotonic()
        self._given_up.clear()  # what was given up before these messages were returned is not among them
        good = []
        for msg in msgs:
            err = msg.error()
            if err is None:
                good.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                self.metrics.errors.labels(kind="consume").inc()
                log.warning("consumer error: %s", err)
        return good

    def _prepare(self, msgs: list[Message]) -> tuple[InFlight, FlatBags]:
        """Decode and tokenize (main thread; overlaps the kernel lane). The bad messages are rejected when the
        batch is handed to the lane (:meth:`_submit`), not here: a batch handed to nobody is read again."""
        t0 = time.perf_counter()
        self._seq += 1
        batch = InFlight(self._seq, msgs, decode_batch(msgs, self.settings.max_article_bytes))
        t1 = time.perf_counter()
        bags = tokenize(self.tokenizer, [a for _, a in batch.decoded.good])
        batch.timings["decode"] = t1 - t0
        batch.timings["tokenize"] = time.perf_counter() - t1
        return batch, bags

    def _without_given_up(self, batch: InFlight, bags: FlatBags) -> tuple[InFlight, FlatBags]:
        """``batch`` without the messages of the partitions given up while the previous batch drained. Whoever
        owns them next reads them again (a replica from the group's committed offset, the learner from its
        positions when they come back), so handing them to the kernel would publish them twice (and dead-letter
        them twice: the batch's bad messages are rejected when it is handed to the lane). The batch keeps its
        number and its delivery tracker."""
        kept = [m for m in batch.msgs if partition_of(m) not in self._given_up]
        if len(kept) == len(batch.msgs):
            return batch, bags
        log.info("dropped %d messages of partitions given up during the wait", len(batch.msgs) - len(kept))
        again = InFlight(batch.seq, kept, decode_batch(kept, self.settings.max_article_bytes), batch.tracker)
        again.timings = batch.timings
        return again, tokenize(self.tokenizer, [a for _, a in again.decoded.good])

    def _run_kernel(self, batch: InFlight) -> NDArray[np.float64]:
        """The kernel lane's work on one batch: its mixtures, then their publication."""
        t0 = time.perf_counter()
        theta = self.compute(batch)
        batch.timings["kernel"] = time.perf_counter() - t0
        self._publish(batch, theta)
        return theta

    def _submit(self, batch: InFlight, bags: FlatBags) -> None:
        t0 = time.perf_counter()
        for msg, rejection in batch.decoded.bad:  # dead letters go out only for a batch that goes on
            self.reject(msg, rejection, batch)
        t1 = time.perf_counter()
        batch.timings["decode"] += t1 - t0
        self.encode(batch, bags)
        batch.timings["tokenize"] += time.perf_counter() - t1
        batch.next_offsets = next_offsets(batch.msgs)
        self.positions.update(batch.next_offsets)
        batch.result = self.lane.submit(self._run_kernel, batch)
        self._inflight = batch
        self.submitted_seq = batch.seq

    def _publish(self, batch: InFlight, theta: NDArray[np.float64]) -> None:
        """Publish ``batch``'s mixtures (kernel lane). Only then is the batch queued for its commit: a batch is
        never judged acknowledged while its sends are still being made."""
        assert batch.model is not None and batch.encoded is not None
        t0 = time.perf_counter()
        if self.publishes and batch.decoded.good:
            tokens = batch.encoded.batch.doc_tokens()
            refuse = partial(self.reject, batch=batch)  # an output over the topic's size limit
            self.publisher.publish(batch.decoded.good, theta, tokens, batch.model, batch.tracker, refuse)
        batch.timings["publish"] = time.perf_counter() - t0
        self._unacked.append(batch)  # in order: the lane runs one batch at a time
        self._observe(batch)

    def _observe(self, batch: InFlight) -> None:
        m = self.metrics
        m.consumed.inc(len(batch.msgs))
        m.batches.inc()
        if batch.encoded is not None:
            m.tokens.inc(float(batch.encoded.batch.counts.sum()))
            m.oov_tokens.inc(batch.encoded.oov_tokens)
            m.wordless.inc(int(np.count_nonzero(np.diff(batch.encoded.batch.indptr) == 0)))
        for stage, dt in batch.timings.items():
            m.batch_duration.labels(stage=stage).observe(dt)

    def _commit_acknowledged(self, wait: bool = False) -> None:
        """Commit the offsets of the oldest batches whose every send the broker has acknowledged (``wait``: a
        synchronous commit, before leaving a partition or the group)."""
        t0 = time.perf_counter()
        offsets: dict[tuple[str, int], int] = {}
        while self._unacked and self._unacked[0].tracker.done:
            batch = self._unacked.popleft()
            try:
                batch.tracker.raise_on_failure()
            except DeliveryError:
                self._break()
                if self.publisher.too_large:  # the next start sends smaller batches (service.refusals)
                    # A copy: the kernel lane's producer polls may run delivery callbacks that add to it meanwhile.
                    refused = dict(self.publisher.too_large)
                    remember(self.store.r, self.settings.redis_prefix, refused, self.message_max_bytes)
                raise
            offsets.update(batch.next_offsets)
            with self._acked:
                self._acked_seq = batch.seq
                self._acked.notify_all()
        if offsets:
            tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            try:
                if wait:
                    self.consumer.commit(offsets=tps, asynchronous=False)
                else:
                    self.consumer.commit(offsets=tps, asynchronous=True)
            except Exception as e:  # e.g. no group membership right now: counted; positions are safe elsewhere
                self.metrics.errors.labels(kind="commit").inc()
                log.warning("offset commit failed: %s", e)
            self.metrics.batch_duration.labels(stage="commit").observe(time.perf_counter() - t0)

    def _break(self) -> None:
        """Nothing after this point may be committed or snapshotted (a failed delivery, a failed kernel call);
        whoever waits for acknowledgements stops waiting."""
        self.broken = True
        with self._acked:
            self._acked.notify_all()

    def wait_acknowledged(self, seq: int, stop: threading.Event | None = None) -> bool:
        """Block until every batch up to ``seq`` is acknowledged (True), or a delivery failed / ``stop`` (False).

        For other threads (the snapshot writer): a snapshot may describe only acknowledged batches.
        """
        with self._acked:
            while self._acked_seq < seq:
                if self.broken or (stop is not None and stop.is_set()):
                    return False
                self._acked.wait(0.5)
            return not self.broken

    def drain(self) -> None:
        """Wait until the batch in the kernel lane, if any, is learned and published (its acknowledgements arrive
        later). A long wait keeps the consumer in its group (:meth:`_keep_alive_until`)."""
        batch = self._inflight
        if batch is None:
            return
        assert batch.result is not None
        if not self._inside_poll:
            self._keep_alive_until(batch.result)
        if self._inflight is not batch:
            return  # a rebalance callback run by the keep-alive poll drained it meanwhile
        self._inflight = None
        try:
            batch.result.result()
        except BaseException:  # the kernel or the publication failed: that batch is neither learned nor sent
            self._break()
            raise
        batch.release()  # learned and published: only its acknowledgements are awaited now
        self.between_batches(batch)

    def flush(self) -> None:
        """Drain, wait for every acknowledgement (as long as it takes: :meth:`_settle` waits a bounded time), commit."""
        self.drain()
        flush_all(self.producer)
        self._commit_acknowledged(wait=True)

    def _settle(self, seconds: float) -> None:
        """Drain, wait at most ``seconds`` for the acknowledgements, commit the batches acknowledged."""
        self.drain()
        deadline = time.monotonic() + seconds
        while self.producer.flush(max(0.0, min(1.0, deadline - time.monotonic()))) and time.monotonic() < deadline:
            pass
        self._commit_acknowledged(wait=True)
        if self._unacked:
            n = len(self._unacked)
            log.warning("%d batches unacknowledged after %.0f s: committed up to them, not past them", n, seconds)

    def _update_lag(self) -> None:
        """Lag per assigned partition: the high watermark (cached from fetch responses, no broker round trip)
        minus our position. (Tansu reports a wrong high watermark; real Kafka is right.) The consumer's own
        position counts too: it moves past a transaction's commit or abort marker, which is no message, so after
        a transactional producer's last write our position alone stayed one short of the watermark for good (a
        lag of 1 on a quiet input, which the alerts take for articles waiting)."""
        assigned = list(self.assigned)
        try:  # local: the positions librdkafka keeps, no broker round trip
            consumer_at = {(tp.topic, tp.partition): tp.offset for tp in self.consumer.position(
                [TopicPartition(t, p) for t, p in assigned])}  # fmt: skip
        except KafkaException:
            consumer_at = {}
        for topic, part in assigned:
            pos = self.positions.get((topic, part))
            if pos is None:
                continue
            pos = max(pos, consumer_at.get((topic, part), pos))
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            except Exception:  # a transient metadata error must not stop the loop
                self.metrics.errors.labels(kind="watermarks").inc()
                continue
            if high >= 0:
                self.metrics.lag.labels(topic=topic, partition=str(part)).set(max(0, high - pos))

    def step(self, timeout: float | None = None, limit: int | None = None) -> int:
        """One turn of the loop; returns the number of messages consumed (0 when the input was quiet).

        ``limit`` caps the messages taken in this turn (tests use it to stop at an exact position)."""
        self._hold_until_acknowledged()
        if self._stop.is_set() or self.must_stop():  # told to stop while it waited: read nothing more
            self._turn_done()
            return 0
        msgs = self._consume(self.settings.batch_timeout_s if timeout is None else timeout, limit)
        self.producer.poll(0)
        self._commit_acknowledged()
        self.metrics.unacked_batches.set(len(self._unacked))
        if not msgs:
            self.drain()
            self.between_batches(None)
            self._turn_done()
            return 0
        batch, bags = self._prepare(msgs)  # overlaps the kernel lane's work on the previous batch
        self.drain()  # the model now includes the previous batch, and its outputs are sent
        self._hold_while(self.must_hold)
        # The hold ended early (told to stop, a failed delivery), or a stop came while the kernel finished the
        # previous batch (a slow kernel's step: the particle filter's refinements take seconds, and a SIGTERM then
        # waited for this batch too): hand the batch to nobody. Its positions have not moved: it is read again,
        # here or by another member (its dead letters are sent then: :meth:`_submit`).
        if self.must_hold() or self._stop.is_set():
            self._turn_done()
            return 0
        if self._given_up:  # a keep-alive poll gave partitions up: their messages are no longer ours
            batch, bags = self._without_given_up(batch, bags)
        if batch.msgs:
            self._submit(batch, bags)
        self._turn_done()
        return len(batch.msgs)

    def _turn_done(self) -> None:
        """End of a turn, quiet or not: the lag (a quiet input's gauge would freeze) and the loop's heartbeat."""
        self._update_lag()
        self.group_stall.check()
        self.metrics.beat()

    def subscribe(self) -> None:
        self._last_consume = time.monotonic()  # the first batch may wait a whole timeout
        self.group_stall.joining()
        self.consumer.subscribe(
            [self.settings.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def run(
        self,
        stop: threading.Event | None = None,
        max_messages: int | None = None,
        until: Callable[[], bool] | None = None,
    ) -> None:
        """Consume until ``stop`` is set (or ``max_messages`` are consumed, or :meth:`must_stop` or ``until()`` is
        true); then drain, flush, commit (and what :meth:`close` adds), leave the group and call :meth:`after_run`."""
        stop = self._stop = stop or threading.Event()
        self.subscribe()
        consumed = 0
        try:
            while not stop.is_set():
                if max_messages is not None and consumed >= max_messages:
                    break
                if self.must_stop() or (until is not None and until()):
                    break
                consumed += self.step()
        finally:
            self.close()
        self.after_run()

    def close(self) -> None:
        """Finish in-flight work and leave the group (subclasses add their final checkpoint)."""
        try:
            if not self.broken:
                self.flush()
        finally:
            self.lane.shutdown(wait=True)
            self.consumer.close()

    def abandon(self) -> None:
        """Stop as a crash would: nothing is flushed, committed or snapshotted (for tests of recovery)."""
        self._break()
        self.lane.shutdown(wait=True)
        self.consumer.close()
