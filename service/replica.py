"""``topicstream replica``: inference-only workers that serve mixtures from the learner's snapshots.

Replicas form their own consumer group on the input topic (so they scale with its partitions) and run the same
batch loop as the learner (:class:`service.worker.BatchWorker`: stage timings, lag, consume and commit errors
are the same metrics). They never change the model or the vocabulary. Bad input is the learner's to dead-letter; a
replica skips it and counts it under ``topicstream_articles_rejected_total{reason}``.

A follower thread polls Redis for a newer snapshot every ``poll_s`` seconds, loads it in the background (when the
newest is unreadable, trying each older version down to the one it serves) and the loop switches to it between two
batches. Any Redis error is logged, counted (``topicstream_errors_total{kind="redis"}``) and retried: the replica
keeps serving its last model through a Redis outage and picks up new versions once Redis is back.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from confluent_kafka import Message
from numpy.typing import NDArray
from typing_extensions import Unpack  # typing.Unpack from Python 3.11

from kernels import TopicModel
from kernels.registry import kernel_class

from .inflight import InFlight, ModelRef
from .lineage import Lineage
from .names import TopicNames
from .pipeline import TopicLabels
from .schemas import Rejection
from .settings import Settings
from .snapshot import STATISTICS, SnapshotStore
from .text import FlatBags, Vocabulary
from .worker import BatchWorker, WorkerParts

__all__ = ["Replica", "Served"]

log = logging.getLogger(__name__)

#: While no snapshot exists, the replica says it is waiting once a minute (its heartbeat beats every second).
WAIT_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Served:
    """A loaded snapshot: everything a batch needs, swapped as one reference."""

    model: TopicModel
    vocab: Vocabulary
    ref: ModelRef
    created_at: float = 0.0  # the snapshot's, for the age gauge
    size_bytes: int = 0


class Replica(BatchWorker):
    """The inference loop; ``run`` waits for the learner's first snapshot, then serves until ``stop``."""

    role = "replica"

    def __init__(self, settings: Settings, poll_s: float = 2.0, **parts: Unpack[WorkerParts]) -> None:
        """``poll_s``: seconds between two looks for a newer snapshot; ``parts``: see
        :class:`~service.worker.WorkerParts`."""
        super().__init__(settings, **parts)
        self.poll_s = poll_s
        self.served: Served | None = None
        self._pending: Served | None = None
        self._pending_lock = threading.Lock()  # the follower thread sets _pending, the loop takes it
        self._redis_down = False
        self._unreadable: set[int] = set()
        self._told_tokenizers: set[str] = set()  # learners' tokenizer fingerprints warned about (a handful)
        self._stop_follower = threading.Event()
        self._follower: threading.Thread | None = None

    @property
    def version(self) -> int:
        return self.served.ref.version if self.served is not None else 0

    @property
    def model(self) -> TopicModel | None:
        return self.served.model if self.served is not None else None

    # ------------------------------------------------------------------ following the learner's snapshots
    def reload(self) -> bool:
        """Load the newest readable snapshot if it is newer than what is served or pending; True when one was
        loaded. Never raises on Redis errors or corrupt snapshots: logs, counts and keeps the current model."""
        with self._pending_lock:  # the loop may be moving pending into served: read the two together
            current = max(self.version, self._pending.ref.version if self._pending is not None else 0)
        try:
            latest = self.store.latest_version()
            if latest is not None and latest < current:
                # Redis lost its data and a learner without state started over at version 1: follow it.
                log.warning("snapshot versions went back from %d to %d: following the new learner", current, latest)
                current = 0
                self._unreadable.clear()
            if latest is None or latest <= current:
                self._redis_back()
                return False
            loaded = self._load_newest_readable(latest, current)
        except Exception as e:  # ConnectionError, TimeoutError, ...: keep serving
            self.metrics.errors.labels(kind="redis").inc()
            if not self._redis_down:
                log.warning(
                    "Redis unavailable (%s: %s); serving version %d until it is back", type(e).__name__, e, self.version
                )
            self._redis_down = True
            return False
        self._redis_back()
        if loaded is None:
            return False
        with self._pending_lock:
            self._pending = loaded
        return True

    def _redis_back(self) -> None:
        if self._redis_down:
            log.info("Redis is back")
            self._redis_down = False

    def _load_newest_readable(self, latest: int, current: int) -> Served | None:
        """The newest kept version in (current, latest] that loads; corrupt ones, and ones that pass their checksum
        but do not make a model (written by another version of topicstream, say), are skipped, logged and counted
        once (a version is immutable once written, so one found unreadable is not read again). Redis errors
        propagate: they are an outage, not a bad snapshot."""
        for version in [v for v in self.store.kept_versions() if current < v <= latest]:
            if version in self._unreadable:
                continue
            t0 = time.perf_counter()
            try:
                loaded = self.store.load(version, nonnegative=STATISTICS)
                if loaded is None:
                    continue
                meta, payload = loaded
                served = self._build(meta, payload)
            except redis.RedisError:
                raise
            except Exception as e:
                self._unreadable.add(version)
                if len(self._unreadable) > 1000:  # bounded: the oldest entries can no longer matter
                    self._unreadable.discard(min(self._unreadable))
                self.metrics.snapshot_fallbacks.inc()
                log.error("snapshot %d is unreadable (%s: %s); trying an older one", version, type(e).__name__, e)
                continue
            m = self.metrics
            m.snapshot_duration.observe(time.perf_counter() - t0)
            log.info("loaded snapshot %d", served.ref.version)
            return served
        return None

    def _build(self, meta: dict[str, Any], payload: dict[str, Any]) -> Served:
        kstate = payload["kernel"]
        cls = kernel_class(kstate["algorithm"])
        if self.served is None or type(self.served.model) is not cls:
            cls.warm_up()
        model = cls.from_state(kstate)
        vocab = Vocabulary.from_state(payload["vocabulary"])
        self._check_tokenizer(payload.get("tokenizer"), int(meta["version"]))
        labels = TopicLabels(model.topic_word(), vocab.slot_words())
        lineage = payload.get("lineage")
        ids = tuple(Lineage.from_state(lineage).slot_ids) if lineage else tuple(range(model.n_topics))
        names = TopicNames(self.store.r, self.settings.redis_prefix).all()
        ref = ModelRef(labels, model.algorithm, int(meta["version"]), model.n_topics, ids, names)
        return Served(model, vocab, ref, float(meta["created_at"]), int(meta.get("size_bytes", 0)))

    def _check_tokenizer(self, learners: object, version: int) -> None:
        """Warn (once per fingerprint) and count ``errors_total{kind="tokenizer"}`` when the learner that wrote a
        snapshot tokenizes otherwise than this replica: the replica would look up words the model never learned
        (another TOPICSTREAM_STOP_WORDS_FILE, TOPICSTREAM_STOP_WORDS_LANGUAGES or TOPICSTREAM_KEEP_WORDS_FILE, or
        a version with other normalisation during a rolling upgrade). It serves the snapshot all the same:
        mixtures from the words both have are better than none. A snapshot without a fingerprint was written by a
        learner older than the fingerprints (the oldest of them normalised no text: for soft hyphens, ligatures
        and the like they make other words): it counts as another tokenizer."""
        ours = self.tokenizer.fingerprint()
        if learners == ours:
            return
        self.metrics.errors.labels(kind="tokenizer").inc()
        told = learners if isinstance(learners, str) else ""
        if told in self._told_tokenizers:
            return
        self._told_tokenizers.add(told)
        if told:
            log.warning(
                "snapshot %d was learned with another tokenizer (fingerprint %s, this replica's %s): give the learner "
                "and the replicas the same TOPICSTREAM_STOP_WORDS_FILE, TOPICSTREAM_STOP_WORDS_LANGUAGES, "
                "TOPICSTREAM_KEEP_WORDS_FILE and version",
                version, told, ours,
            )  # fmt: skip
        else:
            log.warning(
                "snapshot %d records no tokenizer: its learner is older than this replica and may make other words "
                "of text with soft hyphens, ligatures or zero-width characters; upgrade the learner too",
                version,
            )

    def _follow(self) -> None:
        while not self._stop_follower.wait(self.poll_s):
            self.reload()

    # ------------------------------------------------------------------ the worker's hooks
    def consumer_group(self) -> str:
        return self.settings.replica_group()

    def open_store(self) -> SnapshotStore:
        store = SnapshotStore.from_url(self.settings.redis_url, prefix=self.settings.redis_prefix)
        store.r.ping()  # unreachable Redis at start-up: one clear line from the CLI, not a traceback later
        return store

    def start_offset(self, topic: str, partition: int) -> None:
        return None  # the group's committed offsets

    def reject(self, msg: Message, rejection: Rejection, batch: InFlight) -> None:
        self.metrics.rejected.labels(reason=rejection.reason).inc()

    def encode(self, batch: InFlight, bags: FlatBags) -> None:
        served = self.served
        assert served is not None
        batch.encoded = served.vocab.encode(bags, learn=False)
        batch.model = served.ref
        batch.context = served.model

    def compute(self, batch: InFlight) -> NDArray[np.float64]:
        assert batch.encoded is not None and batch.model is not None
        if not batch.decoded.good:
            return np.zeros((0, batch.model.n_topics))
        model: TopicModel = batch.context
        return self.in_pieces(batch.encoded.batch, model.transform)

    def between_batches(self, finished: InFlight | None) -> None:
        with self._pending_lock:  # served and pending change together (reload reads the two)
            pending, self._pending = self._pending, None
            if pending is not None:
                self.served = pending
        if pending is not None:
            # The gauges describe what is served from now on, not what the follower has loaded.
            self.metrics.snapshot_seen(pending.ref.version, pending.created_at, pending.size_bytes)
            self.metrics.describe_model(pending.ref.algorithm, pending.model.n_topics, pending.model.n_words)
            log.info("serving snapshot %d", pending.ref.version)

    # ------------------------------------------------------------------ running
    def run(self, stop: threading.Event | None = None, max_messages: int | None = None, until: Any = None) -> None:
        stop = stop or threading.Event()
        told = -float("inf")
        while self.served is None:
            if self.reload():
                self.between_batches(None)
                break
            # Alive and waiting, not stalled (TopicstreamLoopStalled): a new install may wait long for a snapshot.
            self.metrics.beat()
            if time.monotonic() - told >= WAIT_LOG_EVERY_S:
                told = time.monotonic()
                log.info("waiting for the learner's first snapshot under prefix %r", self.settings.redis_prefix)
            if stop.wait(1.0):
                self.consumer.close()
                self.lane.shutdown()
                return
        self._follower = threading.Thread(target=self._follow, name="snapshot-follower", daemon=True)
        self._follower.start()
        try:
            super().run(stop, max_messages, until)
        finally:
            self._stop_follower.set()
            self._follower.join(10)
