"""What the learner does with topic lineage once a snapshot is written (writer thread).

:class:`LineageFeed` publishes the events of the moves a written snapshot holds: to ``P:lineage`` (Redis), to the
Kafka lineage topic for subscribers that read Kafka only, and along them the names people gave topics
(:meth:`service.names.TopicNames.follow`). What fails (Redis away) is kept and done with the next snapshot,
stamped as it was. :func:`renewals` says which slots of a written snapshot hold another topic than their id stood
for, without a move (the online HDP refills a slot its own learning emptied; a subject grows, step by step, in the
slot another left: :mod:`service.anchors`): the next capture gives them fresh ids
(:meth:`service.lineage.Lineage.renew`), since a topic id must not change meaning.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from confluent_kafka import KafkaException, Message, Producer

from .anchors import ANCHOR_DRIFT, ANCHOR_KEPT, RENEW_WEIGHT
from .checkpoint import Capture
from .lineage import DEFAULT_KEEP, LineageEvent, LineageStore, moved_slots
from .metrics import Metrics
from .names import TopicNames

__all__ = ["RENEW_DRIFT", "LineageFeed", "renewals", "seen_after"]

log = logging.getLogger(__name__)

#: A topic whose word distribution moved by more than this (Hellinger) between two snapshots, without a move, is
#: another topic: it gets a fresh id. Between snapshots a topic moves by a few hundredths once formed (0.01–0.2 on
#: the benchmark streams); the online HDP refilling a slot its learning emptied moves it by 0.6–0.9.
RENEW_DRIFT = 0.5


def renewals(cap: Capture) -> tuple[list[int], list[float]]:
    """The slots of written capture ``cap`` whose topic changed meaning without a move, at a weight of at least
    :data:`RENEW_WEIGHT`: since the snapshot before (drift over :data:`RENEW_DRIFT`, when both snapshots are past the
    hygiene warm-up of 40 documents per slot learned by the kernel: before, every topic is still forming; counted as
    hygiene counts them, without the copies the learner answered), or since their topic formed (over
    :data:`service.anchors.ANCHOR_DRIFT` from its anchor, keeping under :data:`service.anchors.ANCHOR_KEPT` of the
    weight on its first words); and for each the larger of the two distances."""
    K = len(cap.drift)
    if cap.docs_learned < 40 * K:
        return [], []
    moved = moved_slots(cap.events, cap.topic_ids)  # a move changed them, and said so
    # A snapshot of a model still forming is no reference: on a backlog the first two can be 500 and 7,000
    # documents apart, and every topic formed in between (a review: 4 of 20 ids renewed for nothing).
    jump = cap.drift if cap.drift_since_docs >= 40 * K else np.zeros(K)
    far = cap.anchor_drift if cap.anchor_drift is not None else np.zeros(K)
    kept = cap.anchor_kept if cap.anchor_kept is not None else np.ones(K)
    other = (jump > RENEW_DRIFT) | ((far > ANCHOR_DRIFT) & (kept < ANCHOR_KEPT))
    slots = [k for k in range(K) if other[k] and cap.weights[k] >= RENEW_WEIGHT and k not in moved]
    return slots, [max(float(jump[k]), float(far[k])) for k in slots]


def seen_after(seen: frozenset[int], cap: Capture) -> frozenset[int]:
    """The ids seen once capture ``cap`` is written, from those ``seen`` before: the live ones that weigh at least
    :data:`RENEW_WEIGHT` (``topicstream topics`` shows them), or that an event written with it names (born, split,
    or a merge's target, which the merged id's subscribers and name now follow). A move that ends an id not seen is
    no event (:meth:`service.lineage.Lineage.record`)."""
    heavy = {i for i, w in zip(cap.topic_ids, cap.weights, strict=True) if w >= RENEW_WEIGHT}
    told = {i for e in cap.events for i in (e.topic, e.into, e.parent) if i is not None}
    return frozenset(heavy | ((seen | told) & set(cap.topic_ids)))


class LineageFeed:
    """Publishes lineage events to ``store`` (``P:lineage``), to the Kafka ``topic`` through ``producer``, and moves
    ``names`` along them; see the module docstring."""

    def __init__(self, store: LineageStore, names: TopicNames, producer: Producer, topic: str, metrics: Metrics):
        self.store, self.names, self.producer, self.topic, self.metrics = store, names, producer, topic, metrics
        #: Events of snapshots written whose push to P:lineage failed (stamped): pushed with the next ones.
        self.unpushed: list[LineageEvent] = []
        #: Events in P:lineage whose names were not carried along yet (a failure): carried with the next ones.
        self.unnamed: list[LineageEvent] = []

    def publish(self, events: list[LineageEvent]) -> None:
        """``events`` (stamped with their snapshot) and what failed before: to P:lineage, then Kafka, then names."""
        self.unpushed = (self.unpushed + events)[-DEFAULT_KEEP:]
        if self.unpushed:
            self.store.push(self.unpushed)
            pushed, self.unpushed = self.unpushed, []
            self._announce(pushed)
            self.unnamed = (self.unnamed + pushed)[-DEFAULT_KEEP:]
        if self.unnamed:
            self.names.follow(self.unnamed)
            self.unnamed = []

    def _announce(self, events: list[LineageEvent]) -> None:
        """The events on the Kafka lineage topic. The producer retries while the broker is away; a refusal is
        logged and counted (``errors{kind="lineage"}``; P:lineage has the events all the same)."""

        def delivered(err: Any, msg: Message) -> None:
            if err is not None:
                self.metrics.errors.labels(kind="lineage").inc()
                log.warning("lineage event for topic %s not delivered to %s: %s", msg.key(), self.topic, err)

        for e in events:
            key, value, headers = e.kafka_record()
            try:
                self.producer.produce(self.topic, value=value, key=key, headers=headers, on_delivery=delivered)
            except (BufferError, KafkaException) as exc:  # the local queue is full (broker away), or refused
                self.metrics.errors.labels(kind="lineage").inc()
                log.warning("lineage event for topic %s not sent to %s: %s", e.topic, self.topic, exc)
