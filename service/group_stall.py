"""A consumer whose group never assigns it anything: said, counted and alerted.

A learner or a replica that subscribed, or lost its partitions, waits for the group's coordinator to finish a
rebalance; nothing is read meanwhile, and nothing else says so (the loop turns, ``/healthz`` answers). A rebalance
lasts at most ``max.poll.interval.ms`` (the members' time to rejoin) plus ``session.timeout.ms`` once the brokers
answer; a wait for an assignment longer than twice that (the worker's grace) is a coordinator that does not
complete it, or brokers out of reach for most of it (then the client errors and ``partitions_lost`` say so too).
Tansu keeps a group stuck for good when its leader leaves during a rebalance: a learner paused past its lease that
then steps down while the standby joins (a helper's soak: no learner assigned for 19 minutes, nothing said;
``tests/faults/test_process_faults.py`` makes such a group), or a replica that stops while the others rejoin. A
Kafka broker elects another leader. :class:`GroupStallWatch` counts ``topicstream_errors_total{kind="group_stalled"}``
(alert ``TopicstreamErrorEvents``) and logs an error once per :data:`SAY_EVERY_S` while it lasts. An assignment of
nothing (more replicas than partitions) ends a wait: that member is settled, not stalled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .metrics import Metrics

__all__ = ["SAY_EVERY_S", "GroupStallWatch"]

log = logging.getLogger(__name__)

#: Seconds between two reports of one stall.
SAY_EVERY_S = 30.0


class GroupStallWatch:
    """Times a consumer's wait for an assignment: :meth:`joining` (it subscribes), :meth:`unassigned` (it holds no
    partition after a revocation or a lost session), :meth:`assigned` (a rebalance ended, whatever it gave);
    :meth:`check` on each turn of the loop reports a wait longer than ``grace_s``; ``clock`` gives the seconds."""

    def __init__(
        self,
        role: str,
        group: str,
        topic: str,
        metrics: Metrics,
        grace_s: float,
        every_s: float = SAY_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role, self.group, self.topic, self.metrics = role, group, topic, metrics
        self.grace_s, self.every_s, self.clock = grace_s, every_s, clock
        self._waiting_since: float | None = None
        self._next_note = 0.0

    def joining(self) -> None:
        """The consumer subscribes (again): its wait for an assignment starts."""
        self._waiting_since, self._next_note = self.clock(), 0.0

    def unassigned(self) -> None:
        """The consumer holds no partition any more: its wait starts, unless one is already running."""
        if self._waiting_since is None:
            self._waiting_since, self._next_note = self.clock(), 0.0

    def assigned(self) -> None:
        """A rebalance ended with an assignment (also one of nothing): no wait."""
        self._waiting_since = None

    def check(self) -> bool:
        """Whether the consumer has waited longer than ``grace_s`` (the worker's: two rebalances' time); counted and
        logged once per ``every_s`` while it does."""
        if self._waiting_since is None:
            return False
        now = self.clock()
        waited = now - self._waiting_since
        if waited < self.grace_s:
            return False
        if now >= self._next_note:
            self._next_note = now + self.every_s
            self.metrics.errors.labels(kind="group_stalled").inc()
            log.error(
                "no partition of %r has been assigned to this %s for %.0f s, twice as long as a rebalance of its "
                "group %r can last (max.poll.interval.ms + session.timeout.ms), and nothing is read: the brokers are "
                "out of reach (then client errors and a lost session say so too), or the group's coordinator does not "
                "complete the rebalance: describe the group (kafka-consumer-groups.sh --describe --group %s --state "
                "--members); on Tansu a group whose leader left during a rebalance stays so until the broker restarts",
                self.topic, self.role, waited, self.group, self.group,
            )  # fmt: skip
        return True
