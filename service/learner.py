"""``topicstream run``: the learner. One process, one writer of the model.

The batch loop is :class:`service.worker.BatchWorker`'s; the learner supplies what is its own:

* bad messages go to the dead-letter topic with the reason;
* words are mapped to vocabulary slots, learning new words (recycled slots are reset in the kernel first);
* the kernel learns from the batch and returns each article's mixture (``partial_fit_transform``);
* now and then (every N batches or T seconds) a snapshot of model + vocabulary + the offsets they reflect is
  written to Redis off the batch loop (:mod:`service.checkpoint`), and topic hygiene is planned on its copy and
  made at a later capture (docs/topic-hygiene.md, "In the service").

One writer per Redis prefix: before it restores anything or joins the consumer group, a learner takes the lease
(:mod:`service.lease`); a second learner waits as a standby (``topicstream_learner_standby`` = 1) and takes over
once the active one stops renewing it. Every snapshot write carries the lease's fencing token, and Redis refuses
it when a newer learner has taken over: the old one then steps down (:class:`LeaseLost`).

On start the newest *readable* snapshot is restored (a corrupt newest version is skipped, logged and counted;
settings that changed are applied where the kernel allows it, or refused with one line:
:func:`service.compat.restore_plan`) and partitions are read from the offsets it records, so the model never
contains an article twice and never misses one. Versions never go backwards: the learner carries its last version
and fencing token, and when Redis comes back empty it writes its state again at once. SIGTERM/SIGINT finish the
batch in flight, publish and flush it, write a final snapshot, commit, release the lease and leave the group.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition
from numpy.typing import NDArray
from typing_extensions import Unpack  # typing.Unpack from Python 3.11

from kernels import Batch, TopicModel
from kernels.hygiene import Event, RecentDocs, SupportsTopicMoves, TopicHygiene

from .checkpoint import Capture, SnapshotWriter, snapshot_summary
from .duplicates import RecentTexts, text_hashes
from .history import SummaryHistory
from .inflight import InFlight, ModelRef
from .kafka import make_admin, topic_id
from .keys import eviction_risk
from .lease import Lease, LeaseKeeper
from .lineage import DEFAULT_KEEP, Lineage, LineageEvent, LineageStore, describe_event, moved_slots, stamp
from .lineage_feed import LineageFeed, renewals, seen_after
from .names import TopicNames
from .pipeline import TopicLabels
from .restore import Start, StateMismatch, forget_positions, id_changed, restore_or_create
from .schemas import Rejection
from .settings import Settings
from .snapshot import Fence, FencedOut, SnapshotInfo, SnapshotStore
from .text import FlatBags
from .whole_topic import CHECK_EVERY_S, WholeTopicWatch
from .worker import BatchWorker, WorkerParts

__all__ = ["Learner", "LeaseLost", "StateMismatch"]

log = logging.getLogger(__name__)

#: Documents the held-out moves of topic hygiene are scored on: the next ones learned after the copy they are
#: planned on (docs/topic-hygiene.md, "In the service").
UNSEEN_DOCS = 256
#: Fewer unseen documents than this (a stream gone quiet between two snapshots) and the plan skips the held-out
#: moves: document completion on a handful of documents would delete, merge or keep topics by chance.
UNSEEN_MIN_DOCS = 64
#: The longest a batch waits for the snapshot that carries changed topic ids (:meth:`Learner.must_hold`): a write
#: takes a second or two (plus the hygiene plan's 1-3 s when the same capture carries one); a Redis that hangs
#: must not stop the stream.
MAX_ID_HOLD_S = 30.0
#: How long the writer thread, after a snapshot, waits for the brokers to confirm the input topic's id.
TOPIC_ID_TIMEOUT_S = 5.0


class LeaseLost(RuntimeError):
    """Another learner took over this prefix: this one stopped writing and left."""


@dataclass(frozen=True)
class _Copied:
    """What a snapshot takes on the main thread between two batches (the kernel lane copies the model after)."""

    vocab_state: dict[str, Any]
    slot_words: list[str]
    offsets: dict[tuple[str, int], int]
    input_topic_id: str | None
    texts: NDArray[np.uint64] | None
    articles_learned: int


class Learner(BatchWorker):
    """The learning loop. ``run`` blocks until ``stop`` is set."""

    role = "learner"
    #: Seconds between two checks that the learner holds every input partition (:mod:`service.whole_topic`).
    partition_check_s: float = CHECK_EVERY_S

    def __init__(self, settings: Settings, stop: threading.Event | None = None, **parts: Unpack[WorkerParts]) -> None:
        """``stop`` ends the wait of a standby (:class:`LeaseLost`); ``parts``: :class:`~service.worker.WorkerParts`."""
        s = settings
        super().__init__(s, **parts)
        self.lineage_store = LineageStore(self.store.r, s.redis_prefix)
        if (risk := eviction_risk(self.store.r)) is not None:
            log.warning("%s", risk)
        self.lease = Lease.from_url(s.redis_url, s.redis_prefix, ttl_s=s.lease_ttl_s)  # timeouts within the TTL
        self._take_lease(stop)
        # Renewed from now on: reading and checking the snapshots to restore may take longer than the TTL.
        self.keeper = LeaseKeeper(self.lease)
        self.keeper.start()
        try:
            self._start()
        except BaseException:  # a learner that cannot start gives the lease back at once
            self._give_back_lease(lost=self.keeper.lost.is_set())
            raise

    def _start(self) -> None:
        """Everything the learner does once it holds the lease, before its loop: restore (or create) the model and
        its state, and set up what learns, plans and writes."""
        s = self.settings
        start = restore_or_create(s, self.store, self.metrics, self.lineage_store, self.tokenizer)
        self._adopt(start)
        self._set_up_moves(start)
        self._set_up_outputs(start)
        self._set_up_snapshots(start)

    def _adopt(self, start: Start) -> None:
        """The restored (or new) model, vocabulary, positions and lineage, checked against the input topic as it is
        now (a snapshot of another topic of that name, re-created, gives no positions)."""
        s = self.settings
        self._admin = make_admin(s)
        self.input_topic_id = topic_id(s, s.input_topic, admin=self._admin)
        if dropped := start.forget_input_if_recreated(s.input_topic, self.input_topic_id):
            self._input_recreated(start.input_topic_id, self.input_topic_id, dropped)
        elif self.input_topic_id is None and any(t == s.input_topic for t, _ in start.positions):
            # No id from the brokers (the topic is not there yet: brokers back without their data, its creation
            # still to come): the restored positions of this topic were read in the snapshot's id (another topic's
            # positions, after TOPICSTREAM_INPUT_TOPIC changed, are not), which an assignment then
            # compares with the new topic's. Unknown, a new topic was sought to the old offsets (a review: 300 of
            # 600 lost, for good: the next snapshot paired them with the new id).
            self.input_topic_id = start.input_topic_id
        self.model, self.vocab, self.positions = start.model, start.vocab, start.positions
        rebalance_s = (s.max_poll_interval_ms + s.session_timeout_ms) / 1000
        self.whole_topic = WholeTopicWatch(
            self._admin, s.input_topic, self.consumer_group(), self.metrics, self.partition_check_s, rebalance_s
        )
        self.lineage: Lineage = start.lineage or Lineage(s.topics)
        #: The ``next_id`` of the last snapshot written: at most ``Lineage.reserve()`` ids are given out beyond it,
        #: as many as a restart skips (``Lineage.skip_reserve``). Until this learner writes one, no move or renewal
        #: gives one out (the restore's catch-up gives the same ids to the same slots every time).
        self._ids_durable = self.lineage.next_id - self.lineage.reserve()
        #: Lineage events of the moves made since the last snapshot written (a failed write carries them on).
        self._unwritten_events: list[LineageEvent] = start.events
        self.version, self.articles_learned = start.version, start.articles_learned
        #: The newest version this learner knows to be in Redis, complete: the one it restored, then each one it
        #: wrote (0: none). ``version`` may be a newer one whose data was already gone at the restore.
        self._stored_version = start.restored_version

    def _set_up_moves(self, start: Start) -> None:
        """Topic hygiene (when the settings and the kernel allow it) and what it plans on and replays."""
        s = self.settings
        defaults = type(self.model).hygiene_defaults
        hygiene_on = s.topic_hygiene if s.topic_hygiene is not None else defaults is not None
        chosen = {"near_merge_tries": s.topic_hygiene_near_merges}
        if s.topic_hygiene_splits is not None:  # else the kernel's own (the online HDP splits, SCVB0 does not)
            chosen["max_splits"] = s.topic_hygiene_splits
        tidy = TopicHygiene(**{**(defaults or {}), **chosen}) if hygiene_on else None
        # A kernel without a move these settings use (the particle filter has merges only) is refused before
        # this, by service.compat's kernel_param_problems; this keeps hygiene off if one gets here all the same.
        self.hygiene = tidy if tidy is not None and not tidy.missing_moves(self.model) else None
        #: The latest documents learned, that hygiene is planned on.
        self._recent = RecentDocs(self.hygiene.recent_window if self.hygiene is not None else 1)
        #: With held-out moves: the latest UNSEEN_DOCS documents learned since the last capture that hygiene was
        #: planned on (that capture's copy never learned them); None while no copy waits for them.
        self._unseen: RecentDocs | None = None
        #: Writer thread: the copy hygiene is planned on once the next capture brings its unseen documents, and
        #: the recent documents captured with it.
        self._held: tuple[TopicModel, Batch] | None = None
        self._last_hygiene = time.monotonic()
        #: Hygiene moves planned by the writer thread on a snapshot's copy, to be made at the next capture.
        self._planned: list[Event] = []
        #: Kernel lane: vocabulary slots recycled since the last copy hygiene plans on (a replayed birth or split
        #: leaves them out of its proposal), as a mask over the slots.
        self._forgotten = np.zeros(self.model.n_words, dtype=np.bool_)
        #: Slots whose topic changed meaning without a move (writer thread, from a written snapshot's drift):
        #: the next capture gives them fresh ids (:func:`service.lineage_feed.renewals`).
        self._renew: tuple[list[int], list[float]] = ([], [])
        #: Ids of the slots that weighed at least RENEW_WEIGHT in a written snapshot or were named by a lineage
        #: event (writer thread; a restored model's ids all count): a move that ends any other id is no lineage
        #: event (:meth:`Lineage.record`).
        self._seen_ids: frozenset[int] = frozenset(self.lineage.slot_ids if start.restored_version else ())

    def _set_up_outputs(self, start: Start) -> None:
        """The duplicate window (restored with the snapshot), the topic names and the lineage feed."""
        s = self.settings
        #: The latest texts learned (main thread): their copies are answered, not learned again (None: every copy is
        #: learned). A batch's mask of texts new to it travels as ``InFlight.context`` (None: all new).
        self._texts = RecentTexts(s.duplicate_window) if s.duplicate_window > 0 else None
        if self._texts is not None and start.recent_texts is not None:
            self._texts.restore(start.recent_texts)
        self.names = TopicNames(self.store.r, s.redis_prefix)
        self.lineage_feed = LineageFeed(
            self.lineage_store, self.names, self.producer, s.lineage_topic_name(), self.metrics
        )
        self.lineage_feed.unpushed = start.unpublished  # the restored snapshot's events that P:lineage lacks
        self._names: dict[int, str] = {}

    def _set_up_snapshots(self, start: Start) -> None:
        """The kernel compiled, the labels, the snapshot writer (drift measured from a restored model) and the
        snapshot clock."""
        s = self.settings
        log.info("compiling the %s kernel (cached on disk after the first start)", s.algorithm)
        self.metrics.beat()  # restored: each step of a slow start counts as progress
        type(self.model).warm_up(**s.kernel_params)
        self.metrics.beat()
        phi = self.model.topic_word()
        self.labels = TopicLabels(phi, self.vocab.slot_words())
        self._background = self.model.background_topic(phi)  # then each written snapshot's (_written)
        self.metrics.describe_model(s.algorithm, s.topics, s.vocab_size)
        #: Write the state again at the next chance: Redis lost our snapshots (``_check_redis_empty``) ...
        self._republish = threading.Event()
        #: ... or did not take the last write (the writer's ``on_failed``; once its backoff allows).
        self._retry = threading.Event()
        self.writer = SnapshotWriter(
            self.store,
            self.metrics,
            self.wait_acknowledged,
            self._save,
            self._written,
            self._check_redis_empty,
            on_failed=self._retry.set,  # captured again once the backoff allows, even on a quiet input
            plan=self._plan_hygiene if self.hygiene is not None else None,
        )
        if start.restored_version:  # the first snapshot's drift is measured from the restored topics
            model = self.model
            weights, docs = model.topic_weights(), int(model.n_docs_seen_)
            self.writer.drift_from(phi, list(self.lineage.slot_ids), weights, docs, start.anchors)
        del phi
        self._batches_since_snapshot = 0
        self._last_snapshot = time.monotonic()
        # A cold start (no snapshot to restore) snapshots after its first batch: replicas, the HTTP API and
        # `topicstream topics` have a model within a batch, not within TOPICSTREAM_SNAPSHOT_EVERY_S.
        self._first_due = not start.restored_version
        self._last_gauges = 0.0
        self._gauges_due = True  # the model gauges do not describe this model yet (restored, or new)
        self._ids_moving = False  # the capture being written changes topic ids (:meth:`must_hold`)
        self._ids_published = threading.Event()  # set once a snapshot and its lineage events are out
        self._hold_until = 0.0  # when a hold for that gives up (time.monotonic)

    # ------------------------------------------------------------------ state
    def _give_back_lease(self, lost: bool) -> None:
        """Stop renewing the lease and, unless it was lost, release it, so that a standby takes over at once rather
        than a TTL later (:meth:`LeaseKeeper.stop` first waits out a renewal in flight, which would otherwise take
        the released lease back)."""
        self.keeper.stop()
        if not lost:
            with contextlib.suppress(Exception):  # Redis down: the lease simply expires
                self.lease.release()

    def _take_lease(self, stop: threading.Event | None) -> None:
        """Become the one active learner of this prefix, waiting as a standby while another one is."""
        if not self.lease.try_acquire():
            holder = self.lease.holder()
            who = f"{holder.host} pid {holder.pid} (token {holder.token})" if holder else "another learner"
            log.warning(
                "standby: %s holds the learner lease of prefix %r; waiting to take over",
                who,
                self.settings.redis_prefix,
            )
            self.metrics.standby.set(1)
            # After Redis lost its data, leave the lease to its old holder for a while (it reclaims it).
            if not self.lease.acquire(stop=stop, grace_s=2 * self.lease.ttl_s):
                raise LeaseLost("stopped while waiting as a standby")
            self.metrics.beat()  # the loop's clock starts now, not when the process did
            self.metrics.standby.set(0)  # after the heartbeat: /healthz never sees an active learner's old one
        # Read at every scrape: the keeper reclaims the lease with a newer token whenever Redis lost it (restarted
        # empty, an eviction), snapshot written or not.
        self.metrics.lease_token.set_function(lambda: self.lease.token or 0)
        log.info(
            "holding the learner lease of prefix %r (fencing token %s)", self.settings.redis_prefix, self.lease.token
        )

    # ------------------------------------------------------------------ the worker's hooks
    def produced_topics(self) -> list[str]:
        return [*super().produced_topics(), self.settings.lineage_topic_name()]

    def consumer_group(self) -> str:
        return self.settings.learner_group()

    def open_store(self) -> SnapshotStore:
        s = self.settings
        return SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix, keep=s.snapshot_keep, ttl_s=s.snapshot_ttl_s)

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        topic = self.settings.input_topic
        if any(tp.topic == topic for tp in partitions) and self._check_input_topic():
            # The input partitions this learner kept through the rebalance (cooperative-sticky assigns only the
            # new ones) read the new log at the old offsets too: taken back and assigned again from the beginning.
            new = {tp.partition for tp in partitions if tp.topic == topic}
            kept = [TopicPartition(t, p) for t, p in sorted(self.assigned) if t == topic and p not in new]
            if kept:
                self._unassign(consumer, kept)  # also drops what was read of them and not yet learned
                partitions = [*partitions, *kept]
        super()._on_assign(consumer, partitions)
        self.whole_topic.settled()

    def _check_input_topic(self) -> bool:
        """Before partitions of the input topic are sought to ``positions``: if the brokers now give the topic
        another id (deleted and re-created while this learner runs, or brokers back without their data), the
        positions are offsets of the old log. Seeking there skipped the new log's first messages, and for good:
        the next snapshot recorded them with the new id (a review lost 326 of 1,500 articles so). Its partitions
        are read from their beginning instead. Returns whether the id changed."""
        s = self.settings
        now = topic_id(s, s.input_topic, TOPIC_ID_TIMEOUT_S, self._admin)
        was, self.input_topic_id = self.input_topic_id, now or self.input_topic_id
        if not id_changed(was, now):
            return False
        self._input_recreated(was, now, forget_positions(self.positions, s.input_topic))
        return True

    def _input_recreated(self, was: str | None, now: str | None, dropped: dict[tuple[str, int], int]) -> None:
        self.metrics.errors.labels(kind="input_recreated").inc()
        log.warning(
            "input topic %r is not the one the positions were read in (topic id %s, now %s: deleted and re-created, "
            "or the brokers lost their data): its partitions are read from their beginning, not from %s",
            self.settings.input_topic, was, now, dropped,
        )  # fmt: skip

    def _unassign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.whole_topic.rebalancing()  # revoked or lost
        super()._unassign(consumer, partitions)

    def start_offset(self, topic: str, partition: int) -> int:
        # The snapshot is the only record of what the model has learned: a partition it does not mention has
        # contributed nothing yet and is read from its beginning. (Kafka's committed offsets may be ahead of the
        # snapshot — they are for monitoring — and resuming there would lose articles.)
        return self.positions.get((topic, partition), OFFSET_BEGINNING)

    @property
    def publishes(self) -> bool:
        # Once another learner took over, publish nothing more (not even the batch in flight): the successor
        # resumes from the newest snapshot, so these articles are answered there, by a model at least as new,
        # and outputs never carry a version lower than one already published.
        return self.settings.learner_publish and self.keeper.still_held() and not self.lease_lost

    def reject(self, msg: Message, rejection: Rejection, batch: InFlight) -> None:
        self.publisher.dead_letter(msg, rejection, batch.tracker)

    def encode(self, batch: InFlight, bags: FlatBags) -> None:
        # Copies of texts learned lately (service/duplicates.py) are only mapped; compute answers them.
        new = self._texts.first_seen(text_hashes(bags)) if self._texts is not None else None
        batch.context = None if new is None or new.all() else new
        batch.encoded = self.vocab.encode(bags, counted=batch.context)
        # The topic ids are set on the kernel lane, when the mixtures are computed (:meth:`compute`).
        s = self.settings
        batch.model = ModelRef(
            self.labels, s.algorithm, self.version, s.topics, names=self._names, background=self._background
        )
        self.articles_learned += len(batch.decoded.good)

    def compute(self, batch: InFlight) -> NDArray[np.float64]:
        assert batch.encoded is not None
        recycled = batch.encoded.recycled
        if recycled.size:
            self.model.reset_words(recycled)
            self.metrics.vocabulary_recycled.inc(int(recycled.size))
            if self.hygiene is not None:
                self._forgotten[recycled] = True
        # The stable ids of the slots as this batch's mixtures are computed: a capture's moves, on this lane,
        # change them between batches, so the main thread (encode) cannot know them.
        assert batch.model is not None
        batch.model = replace(batch.model, topic_ids=tuple(self.lineage.slot_ids))
        if not batch.decoded.good:
            return np.zeros((0, self.settings.topics))
        docs, new = batch.encoded.batch, batch.context
        if new is None:
            return self._learn(docs)
        # Copies of texts learned lately (service/duplicates.py): answered by the model, after it learned the rest.
        theta = np.empty((docs.n_docs, self.settings.topics))
        if new.any():
            theta[new] = self._learn(docs.take(np.flatnonzero(new)))
        theta[~new] = self.in_pieces(docs.take(np.flatnonzero(~new)), self.model.transform)
        self.metrics.duplicates.inc(int(np.count_nonzero(~new)))
        return theta

    def _learn(self, docs: Batch) -> NDArray[np.float64]:
        """The kernel learns ``docs`` and returns their mixtures; hygiene keeps them as its recent documents."""
        if self.hygiene is not None:
            self._recent.append(docs)
            if self._unseen is not None:
                self._unseen.append(docs)
        return self.in_pieces(docs, self.model.partial_fit_transform)

    def between_batches(self, finished: InFlight | None) -> None:
        if finished is not None:
            self._batches_since_snapshot += 1
            self._gauges_due = True
        # K gauges: at most once a second, and on a quiet turn too, so that neither the last batches of a burst nor
        # a restored model nor hygiene's moves (a snapshot written on a quiet turn) wait for the next batch to show.
        now = time.monotonic()
        if self._gauges_due and now - self._last_gauges >= 1.0:
            self._last_gauges = now
            self._gauges_due = False
            self._model_gauges()
        if self._snapshot_due() and self.writer.ready() and not self.broken:
            self._take_snapshot()
        self.whole_topic.check(self.assigned, self.input_topic_id)
        if self.whole_topic.recreated is not None:
            self._subscribe_again()

    def _subscribe_again(self) -> None:
        """The input topic has another id than the one the positions were read in, and its new partitions are not
        assigned yet: subscribing again makes the consumer take them now (:meth:`_on_assign` then reads them from
        their beginning). It would wait for its next metadata refresh, 5 minutes by default, learning nothing
        meanwhile, or for ever when the group outlived the topic."""
        log.info("subscribing to %r again, to be assigned the new topic's partitions", self.settings.input_topic)
        self.whole_topic.recreated = None
        self.consumer.unsubscribe()
        self.subscribe()

    def must_hold(self) -> bool:
        """While a capture that changes topic ids (hygiene's moves, renewed slots) is being written, the next batch
        waits: its outputs would carry ids that neither Redis nor the lineage feed knows yet, tagged with the
        version before the moves. A subscriber would not yet know that its topic was merged into the id these
        outputs carry, and a learner killed before the write would restore the older lineage and give the same
        fresh id to another topic. The wait ends once the snapshot and its lineage events are out (not the summary
        and history after them); when the write fails (Redis down) or after :data:`MAX_ID_HOLD_S` (a Redis that
        hangs), the loop goes on, and the moves' events are published with the next snapshot written."""
        if not self._ids_moving:
            return False
        if self._ids_published.is_set() or self.writer.wait_idle(0):
            self._ids_moving = False
        elif time.monotonic() >= self._hold_until:
            log.warning("topic ids changed, but their snapshot is not written after %.0f s: going on", MAX_ID_HOLD_S)
            self._ids_moving = False
        return self._ids_moving

    # ------------------------------------------------------------------ snapshots
    def _write_owed(self) -> bool:
        """A write is owed whatever the batches since: Redis lost our snapshots, or did not take the last one."""
        return self._republish.is_set() or self._retry.is_set()

    def _snapshot_due(self) -> bool:
        s = self.settings
        if self._write_owed():
            return True
        if self._batches_since_snapshot == 0:
            return False
        return (
            self._first_due
            or self._batches_since_snapshot >= s.snapshot_every_batches
            or time.monotonic() - self._last_snapshot >= s.snapshot_every_s
        )

    def _take_snapshot(self) -> None:
        """Capture on the kernel lane (it is idle now: called between batches) and hand it to the writer."""
        t0 = time.perf_counter()
        copied = _Copied(
            self.vocab.state_dict(),
            self.vocab.slot_words(),
            dict(self.positions),
            self.input_topic_id,  # the id the positions were read in: here, not on the lane, which a rebalance
            # could precede with another id (:meth:`_check_input_topic`)
            self._texts.state() if self._texts is not None else None,
            self.articles_learned,
        )
        # Called between batches: the lane has finished every submitted batch, and the model, the vocabulary, the
        # positions and the texts learned all stand after batch `submitted_seq` (the batch being prepared is in
        # none of them: its texts are remembered when it is encoded).
        main_s = time.perf_counter() - t0
        # The writer is idle, so the plan and the last write stand still. A plan whose moves could give out more
        # ids than a restart skips (Lineage.reserve: the writes that would hold them failed) is dropped.
        if (n := len(self._planned)) > self.lineage.room(self._ids_durable):
            log.warning("%d topic moves dropped: snapshot writes failed (hygiene plans again)", n)
            self._planned = []
        # Moves planned by the last capture (or slots renewed at its write) change topic ids in this capture:
        # the next batch waits until it is written (:meth:`must_hold`).
        self._ids_moving = bool(self._planned) or bool(self._renew[0])
        if self._ids_moving:
            self._ids_published.clear()
            self._hold_until = time.monotonic() + MAX_ID_HOLD_S
        future = self.lane.submit(self._capture, self.submitted_seq, copied, main_s)
        self._republish.clear()
        self._retry.clear()  # before the writer may fail this capture and set it again (its on_failed)
        self.writer.submit(future)
        self._first_due = False
        self._batches_since_snapshot = 0
        self._last_snapshot = time.monotonic()

    def _capture(
        self,
        seq: int,
        copied: _Copied,
        main_s: float,
    ) -> Capture:
        """Kernel lane: the topic-hygiene moves planned since the last capture (merges, births;
        docs/topic-hygiene.md), then a consistent copy; when hygiene is due, the copy carries the recent documents
        that the writer thread plans the next moves with (:meth:`_plan_hygiene`).

        The stage ``snapshot`` of ``topicstream_batch_duration_seconds`` is what a snapshot holds up the batch
        loop for: ``main_s`` (the vocabulary's copy, on the main thread) plus this capture."""
        t0 = time.perf_counter()
        s = self.settings
        events: list[LineageEvent] = []
        recent = unseen = None
        if self.hygiene is not None:
            planned, self._planned = self._planned, []
            if planned:
                model = cast(SupportsTopicMoves, self.model)  # its moves checked in __init__
                forgotten = np.flatnonzero(self._forgotten) if self._forgotten.any() else None
                moves = self.hygiene.replay(model, planned, forgotten)
                events = self.lineage.record(moves, 0, time.time(), seen=self._seen_ids)
                if events:
                    log.info("topic hygiene: %s", "; ".join(describe_event(e) for e in events))
            if self._unseen is not None:
                unseen, self._unseen = self._unseen.batch(), None
            now = time.monotonic()
            # Not in a capture that hands unseen documents over: the plan made with them is replayed at the next
            # capture, and a copy taken now would lack its moves, so a plan made on it could undo them.
            if unseen is None and now - self._last_hygiene >= s.topic_hygiene_every_s:
                self._last_hygiene = now
                recent = self._recent.batch()
                if recent is not None and self.hygiene.scores_unseen:
                    self._unseen = RecentDocs(UNSEEN_DOCS)
        (slots, drifts), self._renew = self._renew, ([], [])
        moved = moved_slots(events, self.lineage.slot_ids)  # a move just changed them, and said so
        keep = [i for i, k in enumerate(slots) if k not in moved]
        # A guard: renewals come from a written snapshot, after which the room is 2K, and a capture's moves and
        # renewals give each slot at most two ids.
        if len(keep) > (room := max(0, self.lineage.room(self._ids_durable))):
            log.warning("%d topics changed meaning, only %d fresh ids may be given out now", len(keep), room)
            keep = keep[:room]
        events += self.lineage.renew([slots[i] for i in keep], [drifts[i] for i in keep])
        # Events of earlier captures whose write failed come first: the moves are in the model and the lineage
        # already, so they belong to the first snapshot that is written.
        # The newest DEFAULT_KEEP, as P:lineage keeps: while Redis is down, captures go on, each with its moves
        # (older ones reach neither P:lineage, its counts nor the lineage topic; the lineage state is whole).
        self._unwritten_events = (self._unwritten_events + events)[-DEFAULT_KEEP:]
        articles_learned = copied.articles_learned
        meta = {"algorithm": s.algorithm, "topics": s.topics, "articles_learned": articles_learned}
        extra = {
            "articles_learned": articles_learned,
            "lineage": self.lineage.state_dict(),
            # Kept with the moves, so a learner killed before it pushed them to P:lineage pushes them at restart.
            "lineage_events": [e.to_json() for e in self._unwritten_events],
        }
        if copied.input_topic_id is not None:
            extra["input_topic_id"] = copied.input_topic_id
        extra["tokenizer"] = self.tokenizer.fingerprint()  # replicas check theirs against it
        if copied.texts is not None:
            extra["recent_texts"] = copied.texts  # a restart still answers copies of what was learned before it
        cap = self.writer.capture(seq, self.model, copied.vocab_state, copied.slot_words, copied.offsets, extra, meta)
        cap.events = self._unwritten_events
        cap.topic_ids = list(self.lineage.slot_ids)
        cap.next_id = self.lineage.next_id
        cap.hygiene_docs = recent
        cap.unseen_docs = unseen
        if recent is not None:  # this copy is the one the next plan is made on
            self._forgotten[:] = False
        self.metrics.batch_duration.labels(stage="snapshot").observe(main_s + time.perf_counter() - t0)
        return cap

    def _plan_hygiene(self, shadow: TopicModel | None, cap: Capture) -> None:
        """Writer thread, for a capture that carries recent documents (``shadow``: its throw-away model) or
        unseen ones: plan topic hygiene; the moves are made on the live model at the next capture
        (:meth:`TopicHygiene.replay`).

        With held-out moves (the delete move, the background merge) the plan waits for the next capture: they must
        be scored on documents the copy never learned (``kernels/_delete.py``), and those are the ones learned in
        between (``cap.unseen_docs``). The copy is held meanwhile, one K×W array."""
        hygiene = self.hygiene
        assert hygiene is not None  # the hook is given to the writer only with hygiene on
        if self._held is not None and cap.unseen_docs is not None:
            (held, recent), self._held = self._held, None
            unseen = cap.unseen_docs if cap.unseen_docs.n_docs >= UNSEEN_MIN_DOCS else None
            self._planned = hygiene.apply(cast(SupportsTopicMoves, held), recent, unseen)
        if shadow is not None:
            if hygiene.scores_unseen:
                self._held = (shadow, cap.hygiene_docs)
            else:
                self._planned = hygiene.apply(cast(SupportsTopicMoves, shadow), cap.hygiene_docs)

    def _save(self, cap: Capture) -> SnapshotInfo:
        """Write a capture (writer thread): never below our last version, only while our fencing token is the
        newest. A refusal may come from our own keeper: when the lease lapsed with nobody waiting, or Redis came
        back empty (no token at all), it reclaims the lease with a newer token, and a write that carried the old
        one (or came before the reclaim) is refused. So renew once; if the lease is still ours, with a token other
        than the refused one, write again with it."""
        fence = self.lease.fence()

        def write(fence: Fence) -> SnapshotInfo:
            return self.store.save(cap.payload, cap.meta, min_version=self.version, fence=fence)

        try:
            return write(fence)
        except FencedOut:
            self.keeper.step()
            if self.keeper.lost.is_set() or self.lease.token == fence.token:
                raise
            log.warning(
                "snapshot refused for fencing token %s, our lease's before it was reclaimed: writing again with %s",
                fence.token,
                self.lease.token,
            )
            return write(self.lease.fence())

    def _check_redis_empty(self) -> None:
        """Writer thread, while idle: Redis came back without our snapshots (restarted without persistence), or
        evicted the newest one (a maxmemory policy other than noeviction)? Then write the state again at once
        rather than at the next due time (said once, not at every idle check until that write succeeds). Only a
        version this learner saw whole counts: a newer one already unreadable at the restore was reported then."""
        try:
            held = self._stored_version
            if held and (self.store.is_empty() or not self.store.is_stored(held)):
                if not self._republish.is_set():
                    log.warning(
                        "Redis no longer holds snapshot %d under prefix %r (restarted empty, or evicted): writing "
                        "the state again now",
                        held, self.settings.redis_prefix,
                    )  # fmt: skip
                self._republish.set()
        except Exception:  # Redis down: the keeper and the writer report it
            return

    def _written(self, cap: Capture, info: SnapshotInfo) -> None:
        """After a snapshot is in Redis (writer thread): labels, metrics, the lineage events, the summary."""
        assert cap.labels is not None  # described by the writer before the write
        self.labels, self._background = cap.labels, cap.background
        self.version = self._stored_version = info.version
        self._unwritten_events = []  # the next capture waits for this write: no race with it
        self._ids_durable = cap.next_id
        self._renew = renewals(cap)
        self._seen_ids = seen_after(self._seen_ids, cap)
        m = self.metrics  # the snapshot is in Redis: its gauges first, whatever the writes below meet
        ids, background = cap.topic_ids, cap.background
        m.snapshot_seen(info.version, info.created_at, info.size_bytes)
        m.background_topic.set(-1 if background is None else ids[background])
        m.set_topics(ids, drift=cap.drift)  # ids gone lose their series; the new ones' prevalence follows:
        self._gauges_due = True
        for e in cap.events:
            m.topic_events.labels(kind=e.kind).inc()
        self.lineage_feed.publish(stamp(cap.events, info.version, info.created_at))
        self._ids_published.set()  # the ids are in Redis and on the lineage feed: outputs may carry them
        self._names = self.names.all()
        summary = snapshot_summary(cap, info, self.settings.algorithm, self._names)
        m.model_drift.set(summary["model_drift"])
        self.store.put_summary(summary)
        SummaryHistory(self.store.r, self.store.prefix).append(summary)
        log.info(
            "snapshot %d: %.1f MB, %d articles learned",
            info.version,
            info.size_bytes / 1e6,
            summary["articles_learned"],
        )
        # The id the positions were read in goes into a snapshot: the brokers' at the start, or the restored
        # snapshot's when they gave none; asked again while neither is known (a first start whose brokers did not
        # answer, or whose topic was not there yet), here, after the write, so that a broker that does not answer
        # delays no snapshot. Another id than the one known is left to the next assignment of the topic's partitions
        # (:meth:`_check_input_topic`): the positions the snapshots hold are still the old log's until then, and a
        # snapshot must not pair them with the new id.
        if self.input_topic_id is None:
            self.input_topic_id = topic_id(self.settings, self.settings.input_topic, TOPIC_ID_TIMEOUT_S, self._admin)

    def _model_gauges(self) -> None:
        m = self.metrics
        m.set_topics(self.lineage.slot_ids, prevalence=self.model.topic_weights())
        m.topics_used.set(self.model.topics_used())
        m.topics_holding.set(self.model.topics_holding())
        m.vocabulary_words.set(len(self.vocab))
        for name, value in self.model.diagnostics().items():
            m.kernel_stat.labels(stat=name).set(value)

    def checkpoint(self) -> None:
        """Publish and flush what is in flight, then write a snapshot of everything learned and wait for it (also
        when no batch came since a write that failed, or since Redis lost the snapshots)."""
        self.flush()
        self.writer.wait_idle()
        if (self._batches_since_snapshot or self._write_owed()) and not self.broken and not self.lease_lost:
            self._take_snapshot()
            self.writer.wait_idle()

    def _final_checkpoint(self) -> None:
        """The last :meth:`checkpoint`. When its snapshot is not written (Redis refusing or unreachable: the
        writer's ``on_failed`` set ``_retry``), say so: the writer's own line promises a "next attempt"
        that a stopping learner never makes, and the process would stop with no word that the next start reads
        again what was learned since the snapshot Redis holds."""
        self.checkpoint()
        if self.broken or self.lease_lost or not self._retry.is_set():
            return
        try:
            latest = self.store.latest_version()
            resume = f"snapshot {latest}" if latest else "the beginning of the input (Redis holds no snapshot)"
        except Exception:  # Redis does not answer, or its `latest` is unreadable
            resume = "the newest snapshot Redis holds then"
        log.error(
            "stopping without a final snapshot (Redis did not take it: see the snapshot failure above): the next "
            "start resumes from %s and reads again the articles learned since (at least once: nothing is lost)",
            resume,
        )

    @property
    def lease_lost(self) -> bool:
        return self.keeper.lost.is_set() or self.writer.fenced.is_set()

    def must_stop(self) -> bool:
        return self.lease_lost

    def after_run(self) -> None:
        """:meth:`BatchWorker.run` raises :class:`LeaseLost` here when another learner took over meanwhile."""
        if self.lease_lost:
            raise LeaseLost(f"another learner took over prefix {self.settings.redis_prefix!r}; this one stopped")

    def close(self) -> None:
        """Publish and flush what is in flight, write a final snapshot, commit, release the lease, leave."""
        try:
            if self.broken:
                log.error("a delivery or a kernel call failed: no snapshot of a model with unacknowledged outputs")
            elif self.lease_lost:
                self.flush()  # the batch in flight is not published (see publishes); no snapshot: it would be refused
            else:
                self._final_checkpoint()
        finally:
            self.writer.close()
            self._give_back_lease(lost=self.lease_lost)
            self.lane.shutdown(wait=True)
            self.consumer.close()

    def abandon(self) -> None:
        """Stop as SIGKILL would: nothing flushed, committed or snapshotted, the lease left to expire."""
        super().abandon()
        self.writer.close(timeout=30)
        self.keeper.stop()
