"""Following the learner's snapshots: the newest readable one, loaded in the background, served whole.

A :class:`SnapshotFollower` polls Redis for a newer snapshot every ``poll_s`` seconds on a thread of its own, loads
it (when the newest is unreadable, trying each older version down to the one it serves) and keeps it *pending*;
:meth:`SnapshotFollower.swap` makes the pending one the one served, at a moment its owner chooses: a replica
between two batches (:mod:`service.replica`), an API-only replica at once (:class:`service.api.ApiOnlyReplica`).
Any Redis error is logged, counted (``topicstream_errors_total{kind="redis"}``) and retried: the last model is served
through a Redis outage and new versions are picked up once Redis is back.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from numpy.typing import NDArray

from kernels import TopicModel
from kernels.registry import kernel_class

from .inflight import ModelRef
from .lineage import Lineage
from .metrics import Metrics
from .names import TopicNames
from .pipeline import TopicLabels
from .settings import Settings
from .snapshot import STATISTICS, SnapshotStore
from .text import Tokenizer, Vocabulary

__all__ = ["Served", "SnapshotFollower"]

log = logging.getLogger(__name__)

#: While no snapshot exists, the follower says it is waiting once a minute (the heartbeat beats every second).
WAIT_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Served:
    """A loaded snapshot: everything a batch needs, swapped as one reference; and, for the HTTP API's topics
    (:mod:`service.api`), each slot's prevalence and the lineage the snapshot holds (the background slot is the
    ``ref``'s)."""

    model: TopicModel
    vocab: Vocabulary
    ref: ModelRef
    weights: NDArray[np.float64]  # TopicModel.topic_weights(), by slot
    lineage: Lineage | None  # None for a snapshot written before topics had stable ids (ids = slots)
    created_at: float = 0.0  # the snapshot's, for the age gauge
    size_bytes: int = 0


class SnapshotFollower:
    """The snapshot served (:attr:`served`, None before the first), the one loaded next (pending), and the thread
    that looks for newer ones (:meth:`start`, :meth:`stop`)."""

    def __init__(
        self, settings: Settings, store: SnapshotStore, metrics: Metrics, tokenizer: Tokenizer, poll_s: float = 2.0
    ) -> None:
        self.settings, self.store, self.metrics, self.tokenizer = settings, store, metrics, tokenizer
        self.poll_s = poll_s
        self.served: Served | None = None
        self._pending: Served | None = None
        self._pending_lock = threading.Lock()  # the follower thread sets _pending, swap() takes it
        self._redis_down = False
        self._unreadable: set[int] = set()
        self._told_tokenizers: set[str] = set()  # learners' tokenizer fingerprints warned about (a handful)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def version(self) -> int:
        return self.served.ref.version if self.served is not None else 0

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
        phi = model.topic_word()
        labels = TopicLabels(phi, vocab.slot_words())
        lineage = Lineage.from_state(payload["lineage"]) if payload.get("lineage") else None
        ids = tuple(lineage.slot_ids) if lineage is not None else tuple(range(model.n_topics))
        names = TopicNames(self.store.r, self.settings.redis_prefix).all()
        background = model.background_topic(phi)
        ref = ModelRef(labels, model.algorithm, int(meta["version"]), model.n_topics, ids, names, background)
        created, size = float(meta["created_at"]), int(meta.get("size_bytes", 0))
        return Served(model, vocab, ref, model.topic_weights(), lineage, created, size)

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

    def swap(self) -> Served | None:
        """Serve the snapshot loaded last, if one is pending; returns it (None: nothing new)."""
        with self._pending_lock:  # served and pending change together (reload reads the two)
            pending, self._pending = self._pending, None
            if pending is not None:
                self.served = pending
        if pending is not None:
            # The gauges describe what is served from now on, not what the follower has loaded.
            self.metrics.snapshot_seen(pending.ref.version, pending.created_at, pending.size_bytes)
            self.metrics.describe_model(pending.ref.algorithm, pending.model.n_topics, pending.model.n_words)
            log.info("serving snapshot %d", pending.ref.version)
        return pending

    def wait_for_first(self, stop: threading.Event) -> bool:
        """Load and serve the first snapshot, waiting for the learner to write one if need be; False when ``stop``
        came first. Beats the heartbeat every second meanwhile: alive and waiting, not stalled (a new install may
        wait long for its first snapshot; ``TopicstreamLoopStalled``)."""
        told = -float("inf")
        while self.served is None:
            if self.reload():
                self.swap()
                return True
            self.metrics.beat()
            if time.monotonic() - told >= WAIT_LOG_EVERY_S:
                told = time.monotonic()
                log.info("waiting for the learner's first snapshot under prefix %r", self.settings.redis_prefix)
            if stop.wait(1.0):
                return False
        return True

    def start(self) -> None:
        """Look for newer snapshots every ``poll_s`` seconds on a daemon thread, until :meth:`stop`."""
        self._thread = threading.Thread(target=self._follow, name="snapshot-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.reload()
