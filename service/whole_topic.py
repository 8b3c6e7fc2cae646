"""The learner reads every partition of its input topic, or says which ones another consumer holds.

The learner is the only member of its consumer group by design (one active learner per Redis prefix, the lease).
Any other member splits the input with it without an error anywhere: an older replica that takes
``TOPICSTREAM_GROUP_ID`` for its own group during a rolling upgrade, a second learner of another prefix given the
same group, a script someone ran with the learner's group id. The articles of the partitions it holds are then
never learned (measured: 903 of 1,200 articles learned, nothing logged). :class:`WholeTopicWatch` compares the
learner's assignment with the topic's partitions now and then, and warns and counts
``topicstream_errors_total{kind="partitions_elsewhere"}`` (alert ``TopicstreamErrorEvents``) while some partitions
stay elsewhere longer than a rebalance can last. The learner goes on with what it holds: stopping would hand the
other member every partition.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException

from .metrics import Metrics

__all__ = ["CHECK_EVERY_S", "WholeTopicWatch"]

log = logging.getLogger(__name__)

#: Seconds between two checks.
CHECK_EVERY_S = 30.0


class WholeTopicWatch:
    """Checks, at most every ``every_s`` seconds, that ``assigned`` holds every partition of ``topic``; a partition
    missing at every check for ``grace_s`` seconds is held elsewhere. The learner passes the longest a rebalance
    can last, ``max.poll.interval.ms`` (a member's time to rejoin; Tansu makes every join wait that long) plus
    ``session.timeout.ms``: meanwhile a partition may be nobody's, or on its way back. The clock runs only while
    the learner's own last rebalance event was an assignment (:meth:`settled`, :meth:`rebalancing`)."""

    def __init__(self, consumer: Any, topic: str, group: str, metrics: Metrics, every_s: float, grace_s: float) -> None:
        self.consumer, self.topic, self.group, self.metrics = consumer, topic, group, metrics
        self.every_s, self.grace_s = every_s, grace_s
        self._next = time.monotonic() + every_s
        self._missing_since: dict[int, float] = {}  # partition → when the checks first found it missing
        #: The learner's last rebalance ended with an assignment (not a revocation or a lost session since): only
        #: then is a missing partition someone else's, not one on its way back (a rejoin after a broker stall
        #: took 7 s on Tansu, longer than the grace at the tests' timeouts).
        self._settled = False

    def rebalancing(self) -> None:
        """Partitions revoked or lost: the clock stops until the next assignment."""
        self._settled = False
        self._missing_since = {}

    def settled(self) -> None:
        """An assignment ended a rebalance (also one that gave this learner nothing)."""
        self._settled = True

    def check(self, assigned: set[tuple[str, int]]) -> list[int]:
        """The partitions held elsewhere (an empty list most of the time; also when the check is not due or the
        broker did not answer)."""
        now = time.monotonic()
        if now < self._next or not self._settled:
            return []
        self._next = now + self.every_s
        try:
            meta = self.consumer.list_topics(self.topic, timeout=2.0).topics.get(self.topic)
        except KafkaException:  # the brokers out of reach: the consumer's own errors say so
            return []
        if meta is None or meta.error is not None:
            return []
        held = {p for t, p in assigned if t == self.topic}
        missing = set(meta.partitions) - held
        self._missing_since = {p: self._missing_since.get(p, now) for p in missing}
        elsewhere = sorted(p for p, since in self._missing_since.items() if now - since >= self.grace_s)
        if elsewhere:
            self.metrics.errors.labels(kind="partitions_elsewhere").inc()
            log.warning(
                "the learner holds %d of the %d partitions of %r; another consumer in its group %r holds %s, whose "
                "articles are not learned: give every other process another group (replicas older than this "
                "version take TOPICSTREAM_GROUP_ID as theirs)",
                len(held), len(meta.partitions), self.topic, self.group, elsewhere,
            )  # fmt: skip
        return elsewhere
