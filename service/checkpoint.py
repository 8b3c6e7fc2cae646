"""Checkpointing the learner, off the batch loop: capture a consistent state → wait for its outputs' acks → write.

A snapshot must describe exactly the articles its state has learned, and only articles whose outputs the broker
has acknowledged (otherwise a crash after the write would resume past outputs that were never delivered). So:

1. **capture** (:meth:`SnapshotWriter.capture`, on the kernel lane between two batches, when model, vocabulary
   and positions describe the same point): copy the kernel state and its topic weights. This is the only part
   that delays learning (25–40 ms at K = 100, W = 65,536 in ``benchmarks/bench_service.py``; topic-hygiene moves
   planned by an earlier snapshot are made just before it, which costs row updates only), except that a capture
   whose moves changed topic ids holds the next batch until the write below has published them
   (``Learner.must_hold``);
2. **describe** (writer thread, :meth:`SnapshotWriter._describe`): φ, the topic labels, the drift against the
   previous snapshot and each topic's distance from what its id stood for (:mod:`service.anchors`), from a model
   rebuilt from the copy; then, for a capture that carries recent documents,
   the ``plan`` hook, which may change that throw-away model at will (the learner plans topic hygiene on it:
   one to three seconds of a core that hold up no batch, but the one after a capture that changed ids);
3. **wait** (writer thread) until every batch up to the captured one is acknowledged; a failed delivery discards
   the capture, and the learner stops;
4. **write** (writer thread): pack, checksum and store in Redis (seconds for a large model), then the summary.

At most one capture is in the writer at a time: when a snapshot is due while the previous one is still being
written, the loop simply goes on and tries again after the next batch. When Redis is down, attempts are spaced
by an exponential, capped backoff and counted, and a refused write is captured again once the backoff allows,
whether or not a batch came since; learning and publishing go on (a batch held for changed ids
goes on once the write has failed, or after ``MAX_ID_HOLD_S`` of a Redis that hangs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernels import TopicModel
from kernels.hygiene import mass_topics
from kernels.summaries import hellinger_rows

from .anchors import TopicAnchors
from .backoff import Backoff
from .lineage import moved_slots
from .metrics import Metrics
from .pipeline import TopicLabels, topic_entry
from .snapshot import FencedOut, SnapshotInfo, SnapshotStore

__all__ = ["Capture", "SnapshotWriter", "snapshot_summary"]

log = logging.getLogger(__name__)


def _yield_to_the_batch_loop() -> None:
    """Lower this thread's CPU priority (Linux: a thread's nice value; elsewhere nothing): describing and writing
    a snapshot takes about half a second of a core at K = 100, W = 65,536, which the batch loop's two threads
    should get first when the machine is busy."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


@dataclass
class Capture:
    """A consistent copy of the learner's state after batch ``seq``, ready to be written."""

    seq: int
    payload: dict[str, Any]
    meta: dict[str, Any]
    labels: TopicLabels | None
    weights: NDArray[np.float64]
    drift: NDArray[np.float64]
    topics_used: int
    events: list[Any] = field(default_factory=list)  # lineage events of the hygiene moves made just before
    model_class: Any = None  # the kernel's class, to rebuild the captured state on the writer thread
    slot_words: list[str] = field(default_factory=list)
    docs_learned: int = 0  # the documents the kernel has learned (TopicModel.n_docs_seen_; copies answered are not)
    topic_ids: list[int] = field(default_factory=list)  # stable id of each slot
    next_id: int = 0  # the topic lineage's next fresh id
    hygiene_docs: Any = None  # recent documents (a kernels.Batch) when topic hygiene is to be planned on this copy
    #: Documents learned since the last capture with ``hygiene_docs``, which that capture's copy never learned (a
    #: kernels.Batch): the held-out moves of the plan made on that copy are scored on them.
    unseen_docs: Any = None
    background: int | None = None  # slot of the background topic (TopicModel.background_topic), set by the writer
    #: φ (float32) of this capture, set by the writer: the next snapshot's drift is measured against it once this
    #: one is written (a failed write leaves the last written φ as the reference, so no change goes unseen).
    phi: NDArray[np.float32] | None = None
    #: Each slot's Hellinger distance from its anchor, and the share of its anchor's first words' weight it kept
    #: (:meth:`service.anchors.TopicAnchors.compare`), set by the writer.
    anchor_drift: NDArray[np.float64] | None = None
    anchor_kept: NDArray[np.float64] | None = None
    #: The documents the model had learned at the snapshot ``drift`` is measured from (0: no such snapshot).
    drift_since_docs: int = 0


@dataclass(eq=False)
class SnapshotWriter:
    """Writes captures to Redis on its own thread (see the module docstring).

    ``wait_acknowledged(seq, stop)`` waits until every batch up to ``seq`` is acknowledged (False: discard the
    capture); ``save`` writes a capture, ``on_written`` follows a write, ``on_failed`` a write that Redis did not
    take (the learner then captures again once the backoff allows, even when no batch came since); ``on_idle`` is
    called after ``idle_s`` seconds without a capture; ``plan`` is called for captures with ``hygiene_docs`` (with
    the copy rebuilt from the captured state) or ``unseen_docs`` (with ``None`` when it has no ``hygiene_docs``).
    """

    store: SnapshotStore
    metrics: Metrics
    wait_acknowledged: Callable[[int, threading.Event], bool]
    save: Callable[[Capture], SnapshotInfo]
    on_written: Callable[[Capture, SnapshotInfo], None]
    on_idle: Callable[[], None] | None = None
    on_failed: Callable[[], None] | None = None
    idle_s: float = 2.0
    plan: Callable[[TopicModel | None, Capture], None] | None = None
    backoff: Backoff = field(default_factory=Backoff, init=False)
    #: Set when Redis refused a write because another learner holds a newer fencing token.
    fenced: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        self._queue: queue.Queue[Future[Capture] | None] = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._prev_phi: NDArray[np.float32] | None = None
        self._prev_docs = 0  # the documents learned by the model of _prev_phi
        self.anchors = TopicAnchors()  # what each topic id stood for once formed (writer thread)
        self._thread = threading.Thread(target=self._loop, name="snapshot-writer", daemon=True)
        self._thread.start()

    def drift_from(
        self,
        phi: NDArray[np.floating],
        ids: list[int],
        weights: NDArray[np.floating],
        docs_learned: int,
        anchors: object = None,
    ) -> None:
        """Measure the next snapshot's drift from ``phi`` (a restored model's topics, with their ``ids`` and
        ``weights``, after ``docs_learned`` documents; call before the first capture), and take the topics'
        ``anchors`` the snapshot holds (:meth:`TopicAnchors.state_after`), or anchor them where they stand when it
        holds none (older snapshots) or none that fits. Without it the first snapshot after a restart had drift 0
        for every topic: the drift alert missed what changed while the learner was away, and topics that changed
        meaning kept their ids."""
        self._prev_phi, self._prev_docs = np.asarray(phi, dtype=np.float32).copy(), docs_learned
        if self.anchors.load(anchors, self._prev_phi):
            return
        if anchors is not None:
            log.warning("the snapshot's topic anchors do not fit its model: anchoring its topics where they stand")
        self.anchors.restore(self._prev_phi, ids, weights, docs_learned)

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def ready(self) -> bool:
        """True when a new capture would be written now (not busy, not backing off after a failure)."""
        return not self.busy and self.backoff.ready(time.monotonic()) and not self.fenced.is_set()

    def capture(
        self,
        seq: int,
        model: TopicModel,
        vocab_state: dict[str, Any],
        slot_words: list[str],
        offsets: dict[tuple[str, int], int],
        extra: dict[str, Any],
        meta: dict[str, Any],
    ) -> Capture:
        """Copy what a snapshot needs (call on the kernel lane, between batches): the kernel's state (a copy,
        tens of ms at K = 100, W = 65,536) and its topic weights. Everything derived from φ is computed later, on
        the writer thread, from that copy (:meth:`_describe`), so the kernel is held up as little as possible."""
        payload = {
            "kernel": model.state_dict(),
            "vocabulary": vocab_state,
            "offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())],
            **extra,
        }
        weights = model.topic_weights()
        empty = np.zeros(len(weights))
        cap = Capture(seq, payload, meta, None, weights, empty, model.topics_used())
        cap.model_class = type(model)
        cap.slot_words = slot_words
        cap.docs_learned = int(model.n_docs_seen_)
        return cap

    def _describe(self, cap: Capture) -> float:
        """Labels, drift and the background topic from the captured state (writer thread): a throw-away model
        rebuilt from the copy; and the topic-hygiene plan, if one is due (``plan``). Returns the plan's seconds."""
        shadow = cap.model_class.from_state(cap.payload["kernel"])
        phi = shadow.topic_word()
        cap.background = shadow.background_topic(phi)
        if self.plan is None or cap.hygiene_docs is None:
            shadow = None  # not needed any more: a K×W array less at the peak of a snapshot's memory
        cap.labels = TopicLabels(phi, cap.slot_words)
        if self._prev_phi is not None and self._prev_phi.shape == phi.shape:
            cap.drift = hellinger_rows(phi, self._prev_phi)
            cap.drift_since_docs = self._prev_docs
        cap.anchor_drift, cap.anchor_kept = self.anchors.compare(phi, cap.topic_ids)
        cap.phi = phi.astype(np.float32)
        del phi
        moved = moved_slots(cap.events, cap.topic_ids)
        anchors = self.anchors.state_after(cap.phi, cap.topic_ids, cap.weights, cap.docs_learned, moved)
        if anchors is not None:  # a restart goes on from them (service/anchors.py)
            cap.payload["anchors"] = anchors
        if self.plan is None or (shadow is None and cap.unseen_docs is None):
            return 0.0
        t0 = time.perf_counter()
        self.plan(shadow, cap)
        spent = time.perf_counter() - t0
        self.metrics.hygiene_plan_duration.observe(spent)
        return spent

    def submit(self, capture: Future[Capture]) -> None:
        self._idle.clear()
        self._queue.put(capture)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    def _loop(self) -> None:
        _yield_to_the_batch_loop()
        while True:
            try:
                job = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                if self.on_idle is not None:
                    self.on_idle()
                continue
            try:
                if job is None:
                    return
                self._write(job)
            finally:
                if self._queue.empty():
                    self._idle.set()

    def _write(self, job: Future[Capture]) -> None:
        try:
            cap = job.result()  # waits for the batch ahead of the capture on the kernel lane: not timed
        except Exception:
            self.metrics.snapshot_failures.inc()
            log.exception("capturing the state for a snapshot failed")
            return
        t0 = time.perf_counter()
        try:
            t0 += self._describe(cap)  # the hygiene plan's time is its own series, not the snapshot's
        except Exception:
            self.metrics.snapshot_failures.inc()
            log.exception("describing the captured state failed")
            return
        waited = time.perf_counter()
        if not self.wait_acknowledged(cap.seq, self._stop):
            log.warning("not writing the snapshot of batch %d: its outputs were not acknowledged", cap.seq)
            return
        t0 += time.perf_counter() - waited  # the broker's acknowledgements are not the snapshot's time either
        try:
            info = self.save(cap)
        except FencedOut as e:
            self.fenced.set()
            self.metrics.errors.labels(kind="fenced").inc()
            log.error("snapshot refused: %s; another learner holds a newer fencing token, stepping down", e)
            return
        except Exception as e:
            delay = self.backoff.failed(time.monotonic())
            self.metrics.snapshot_failures.inc()
            log.warning("snapshot failed (%s: %s); next attempt in %.1f s at the earliest", type(e).__name__, e, delay)
            if self.on_failed is not None:
                self.on_failed()
            return
        self.backoff.succeeded()
        del cap.payload  # the packed copy is in Redis now
        assert cap.phi is not None  # described above
        try:  # nothing after the write may end this thread: close() would wait for it for ever
            changed = moved_slots(cap.events, cap.topic_ids)
            self.anchors.update(cap.phi, cap.topic_ids, cap.weights, cap.docs_learned, changed)
        except Exception:
            log.exception("snapshot %d written, but its topics' anchors were not updated", info.version)
        self._prev_phi, cap.phi = cap.phi, None  # the reference of the next snapshot's drift
        self._prev_docs = cap.docs_learned
        try:
            self.on_written(cap, info)
        except Exception:
            self.metrics.errors.labels(kind="summary").inc()
            log.exception("snapshot %d written, but its summary was not", info.version)
        self.metrics.snapshot_duration.observe(time.perf_counter() - t0)

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued (unless the learner is broken), then stop the thread."""
        self.wait_idle(timeout)
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout)


def snapshot_summary(cap: Capture, info: SnapshotInfo, algorithm: str, names: dict[int, str]) -> dict[str, Any]:
    """The summary of a written snapshot (``P:summary``, what ``topicstream topics`` and the subscriptions read):
    every topic by its stable id, with its slot, name, prevalence, drift, top words and background flag."""
    assert cap.labels is not None  # described by the writer before the write
    ids = cap.topic_ids
    return {
        "version": info.version,
        "algorithm": algorithm,
        "created_at": info.created_at,
        "articles_learned": cap.meta["articles_learned"],
        "topics_used": cap.topics_used,
        "topics_holding_95": mass_topics(cap.weights),  # TopicModel.topics_holding of the captured state
        "model_drift": float(np.dot(cap.weights, cap.drift)),
        "topics": [  # by the stable id, as in outputs, headers and gauges
            {
                **topic_entry(ids[k], k, names, cap.weights[k], cap.labels.top_words[k], k == cap.background),
                "drift": float(cap.drift[k]),
            }
            for k in range(len(cap.weights))
        ],
    }
