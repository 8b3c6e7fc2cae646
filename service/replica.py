"""``topicstream replica``: inference-only workers that serve mixtures from the learner's snapshots.

Replicas form their own consumer group on the input topic (so they scale with its partitions) and run the same
batch loop as the learner (:class:`service.worker.BatchWorker`: stage timings, lag, consume and commit errors
are the same metrics). They never change the model or the vocabulary. Bad input is the learner's to dead-letter; a
replica skips it and counts it under ``topicstream_articles_rejected_total{reason}``.

A :class:`~service.follower.SnapshotFollower` loads newer snapshots in the background (and keeps serving the last
one through a Redis outage); the loop switches to a new one between two batches.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
from confluent_kafka import Message
from numpy.typing import NDArray
from typing_extensions import Unpack  # typing.Unpack from Python 3.11

from kernels import TopicModel

from .follower import Served, SnapshotFollower
from .inflight import InFlight
from .schemas import Rejection
from .settings import Settings
from .snapshot import SnapshotStore
from .text import FlatBags
from .worker import BatchWorker, WorkerParts

__all__ = ["Replica", "Served"]

log = logging.getLogger(__name__)


class Replica(BatchWorker):
    """The inference loop; ``run`` waits for the learner's first snapshot, then serves until ``stop``."""

    role = "replica"

    def __init__(self, settings: Settings, poll_s: float = 2.0, **parts: Unpack[WorkerParts]) -> None:
        """``poll_s``: seconds between two looks for a newer snapshot; ``parts``: see
        :class:`~service.worker.WorkerParts`."""
        super().__init__(settings, **parts)
        self.follower = SnapshotFollower(settings, self.store, self.metrics, self.tokenizer, poll_s)

    @property
    def served(self) -> Served | None:
        return self.follower.served

    @property
    def version(self) -> int:
        return self.follower.version

    @property
    def model(self) -> TopicModel | None:
        return self.served.model if self.served is not None else None

    def reload(self) -> bool:
        """Load the newest readable snapshot, to be served from the next batch on (:meth:`SnapshotFollower.reload`)."""
        return self.follower.reload()

    # ------------------------------------------------------------------ the worker's hooks
    def produced_topics(self) -> list[str]:
        return [self.settings.output_topic]  # rejects are counted, not dead-lettered

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
        self.follower.swap()

    # ------------------------------------------------------------------ running
    def run(self, stop: threading.Event | None = None, max_messages: int | None = None, until: Any = None) -> None:
        stop = stop or threading.Event()
        if not self.follower.wait_for_first(stop):
            self.consumer.close()
            self.lane.shutdown()
            return
        self.follower.start()
        try:
            super().run(stop, max_messages, until)
        finally:
            self.follower.stop()
