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

The question goes to the brokers through the admin client's futures and the answer is taken on a later turn of
the batch loop, which never waits for it: the first version asked ``Consumer.list_topics`` on the loop, which held
the loop for its whole 2 s timeout every 30 s while the brokers did not answer.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException, TopicCollection

from .kafka import given_id
from .metrics import Metrics

__all__ = ["CHECK_EVERY_S", "WholeTopicWatch"]

log = logging.getLogger(__name__)

#: Seconds between two checks.
CHECK_EVERY_S = 30.0
#: Seconds the brokers have to answer one check's question (the loop does not wait for it).
ANSWER_TIMEOUT_S = 10.0


class WholeTopicWatch:
    """Checks, at most every ``every_s`` seconds, that ``assigned`` holds every partition of ``topic``; a partition
    missing at every check for ``grace_s`` seconds is held elsewhere. The learner passes the longest a rebalance
    can last, ``max.poll.interval.ms`` (a member's time to rejoin; Tansu makes every join wait that long) plus
    ``session.timeout.ms``: meanwhile a partition may be nobody's, or on its way back. The clock runs only while
    the learner's own last rebalance event was an assignment (:meth:`settled`, :meth:`rebalancing`). ``admin`` is
    the learner's ``AdminClient``: its ``describe_topics`` answers through a future, so no check waits."""

    def __init__(self, admin: Any, topic: str, group: str, metrics: Metrics, every_s: float, grace_s: float) -> None:
        self.admin, self.topic, self.group, self.metrics = admin, topic, group, metrics
        self.every_s, self.grace_s = every_s, grace_s
        self._next = time.monotonic() + every_s
        self._asked: Future[Any] | None = None  # the question in flight
        self._missing_since: dict[int, float] = {}  # partition → when the checks first found it missing
        #: The learner's last rebalance ended with an assignment (not a revocation or a lost session since): only
        #: then is a missing partition someone else's, not one on its way back (a rejoin after a broker stall
        #: took 7 s on Tansu, longer than the grace at the tests' timeouts).
        self._settled = False
        self._told_id: str | None = None  # the other topic id last warned about
        #: The topic's id at the last answer when it was not the learner's (the topic re-created), else None: the
        #: learner then subscribes again, as its consumer would only at its next metadata refresh (5 minutes by
        #: default), or never when the group outlived the topic (librdkafka does not follow a re-creation).
        self.recreated: str | None = None

    def rebalancing(self) -> None:
        """Partitions revoked or lost: the clock stops until the next assignment (an answer in flight is dropped)."""
        self._settled = False
        self._missing_since = {}
        self._asked = None

    def settled(self) -> None:
        """An assignment ended a rebalance (also one that gave this learner nothing)."""
        self._settled = True

    def check(self, assigned: set[tuple[str, int]], known_id: str | None = None) -> list[int]:
        """The partitions held elsewhere, from the brokers' answer to the question asked at an earlier call (an
        empty list most of the time: while no check is due, while the answer is on its way, and when the brokers
        did not give one). Never waits for the brokers. Also hands the admin client's log lines to logging.
        ``known_id``: the topic id the learner reads; when the brokers give another, the topic was re-created and
        no other consumer is to blame: that is said instead (once per id)."""
        self.admin.poll(0)
        if not self._settled:
            return []
        now = time.monotonic()
        if self._asked is None:
            if now >= self._next:
                self._next = now + self.every_s
                self._ask()
            return []
        if not self._asked.done():
            return []
        asked, self._asked = self._asked, None
        try:
            described = asked.result()
        except KafkaException:  # the brokers out of reach, or the topic gone: the consumer's own errors say so
            return []
        partitions = {p.id for p in described.partitions}
        now_id = given_id(described.topic_id)
        recreated = known_id is not None and now_id is not None and now_id != known_id
        self.recreated = now_id if recreated else None
        if recreated and now_id != self._told_id:
            self._told_id = now_id
            log.warning(
                "input topic %r has another id (%s) than the one this learner reads (%s): it was deleted and "
                "re-created, or the brokers lost their data; it subscribes again to be assigned the new partitions, "
                "and reads them from their beginning; if 'is not the one the positions were read in' does not "
                "follow, restart the learner (a restart compares the ids)",
                self.topic, now_id, known_id,
            )  # fmt: skip
        if recreated:
            self._missing_since = {}
            return []
        held = {p for t, p in assigned if t == self.topic}
        missing = partitions - held
        self._missing_since = {p: self._missing_since.get(p, now) for p in missing}
        elsewhere = sorted(p for p, since in self._missing_since.items() if now - since >= self.grace_s)
        if elsewhere:
            self.metrics.errors.labels(kind="partitions_elsewhere").inc()
            log.warning(
                "the learner holds %d of the %d partitions of %r; another consumer in its group %r holds %s, whose "
                "articles are not learned: give every other process another group (replicas older than this "
                "version take TOPICSTREAM_GROUP_ID as theirs)",
                len(held), len(partitions), self.topic, self.group, elsewhere,
            )  # fmt: skip
        return elsewhere

    def _ask(self) -> None:
        try:
            futures = self.admin.describe_topics(TopicCollection([self.topic]), request_timeout=ANSWER_TIMEOUT_S)
        except KafkaException:  # refused before it was sent (the client's queue is full)
            return
        self._asked = futures[self.topic]
