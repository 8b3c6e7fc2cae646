"""A consumer whose group never assigns it (:mod:`service.group_stall`): the watch on its own, on a clock the test
moves, with the real metrics; the learner and the replica feed it from their rebalance callbacks
(``service/worker.py``), and ``tests/faults/test_process_faults.py`` runs it in a learner on a stuck group."""

from __future__ import annotations

import pytest

from service.group_stall import GroupStallWatch
from service.metrics import Metrics


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stalled(m: Metrics) -> float:
    return m.errors.labels(kind="group_stalled")._value.get()


def test_a_group_that_never_assigns_the_consumer_is_said_after_the_longest_rebalance(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Tansu keeps a group whose leader left during a rebalance for good: a helper's soak had no learner assigned for
    19 minutes, and nothing said so. A wait longer than the grace (two rebalances' time) is counted and logged, once per
    ``every_s``, from the subscription and again from the loss of every partition; an assignment ends it."""
    m, clock = Metrics(), _Clock()
    watch = GroupStallWatch("learner", "g", "in", m, grace_s=6.0, every_s=30.0, clock=clock)
    assert not watch.check()  # not subscribed yet
    watch.joining()
    clock.now += 5.9
    assert not watch.check() and _stalled(m) == 0  # a rebalance may take the grace
    clock.now += 0.2
    assert watch.check() and _stalled(m) == 1
    assert "no partition of 'in' has been assigned to this learner for 6 s" in caplog.text
    clock.now += 29.0
    assert watch.check() and _stalled(m) == 1  # said once per every_s
    clock.now += 1.0
    assert watch.check() and _stalled(m) == 2
    watch.assigned()
    assert not watch.check() and _stalled(m) == 2
    clock.now += 2.0
    watch.unassigned()  # revoked or lost, 3 s after the last report: a new wait, said as soon as it is one
    clock.now += 6.0
    assert watch.check() and _stalled(m) == 3


def test_an_assignment_of_nothing_is_settled() -> None:
    """More replicas than partitions: a replica assigned nothing is settled, not stalled; a second loss of partitions
    during a wait does not restart it."""
    m, clock = Metrics(), _Clock()
    watch = GroupStallWatch("replica", "g", "in", m, grace_s=6.0, clock=clock)
    watch.joining()
    watch.assigned()  # an empty assignment ends the wait too
    clock.now += 100.0
    assert not watch.check() and _stalled(m) == 0
    watch.unassigned()
    clock.now += 4.0
    watch.unassigned()
    clock.now += 2.0
    assert watch.check() and _stalled(m) == 1
