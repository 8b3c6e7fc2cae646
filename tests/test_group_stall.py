"""A consumer whose group never assigns it (:mod:`service.group_stall`): the watch on its own, with the real clock
and the real metrics; the learner and the replica feed it from their rebalance callbacks (``service/worker.py``)."""

from __future__ import annotations

import time

import pytest

from service.group_stall import GroupStallWatch
from service.metrics import Metrics


def _stalled(m: Metrics) -> float:
    return m.errors.labels(kind="group_stalled")._value.get()


def test_a_group_that_never_assigns_the_consumer_is_said_after_the_longest_rebalance(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Tansu keeps a group whose leader left during a rebalance for good: a helper's soak had no learner assigned for
    19 minutes, and nothing said so. A wait longer than a rebalance can last is counted and logged, once per
    ``every_s``, from the subscription and again from the loss of every partition; an assignment ends it."""
    m = Metrics()
    watch = GroupStallWatch("learner", "g", "in", m, grace_s=0.3, every_s=0.0)
    assert not watch.check()  # not subscribed yet
    watch.joining()
    assert not watch.check() and _stalled(m) == 0  # a rebalance may take the grace
    time.sleep(0.35)
    assert watch.check() and watch.check() and _stalled(m) == 2
    assert "no partition of 'in' has been assigned to this learner" in caplog.text
    watch.assigned()
    assert not watch.check() and _stalled(m) == 2
    watch.unassigned()  # revoked or lost: the wait starts again
    assert not watch.check()
    time.sleep(0.35)
    assert watch.check() and _stalled(m) == 3


def test_an_assignment_of_nothing_is_settled_and_a_stall_is_said_once_per_interval() -> None:
    """More replicas than partitions: a replica assigned nothing is settled, not stalled. A stall is counted once per
    ``every_s``, not on every turn of the loop."""
    m = Metrics()
    watch = GroupStallWatch("replica", "g", "in", m, grace_s=0.0, every_s=60.0)
    watch.joining()
    watch.assigned()  # an empty assignment ends the wait too
    assert not watch.check() and _stalled(m) == 0
    watch.unassigned()
    assert watch.check() and watch.check() and watch.check()
    assert _stalled(m) == 1
