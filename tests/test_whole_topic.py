"""The learner's check that it holds every input partition (:mod:`service.whole_topic`), on a stand-in for the
broker's metadata; ``tests/integration/test_learner.py`` runs it against a real broker and a real second consumer."""

from __future__ import annotations

from types import SimpleNamespace

from service.metrics import Metrics
from service.whole_topic import WholeTopicWatch


class _Metadata:
    """What ``Consumer.list_topics`` answers for a topic of ``n`` partitions."""

    def __init__(self, n: int) -> None:
        self.n = n

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        meta = SimpleNamespace(partitions={p: None for p in range(self.n)}, error=None)
        return SimpleNamespace(topics={topic: meta})


def _elsewhere(m: Metrics) -> float:
    return m.errors.labels(kind="partitions_elsewhere")._value.get()


def test_partitions_count_as_elsewhere_only_after_an_assignment_and_the_grace() -> None:
    """A lost session (a broker stall) leaves the learner with nothing until it rejoins, which took 7 s on Tansu,
    longer than the grace at the tests' timeouts: the check warned of another consumer that did not exist. The
    clock now runs only after the learner's own last rebalance event was an assignment."""
    m = Metrics()
    watch = WholeTopicWatch(_Metadata(2), "in", "g", m, every_s=0.0, grace_s=0.0)
    assert watch.check(set()) == []  # before the first assignment: joining
    watch.settled()
    assert watch.check({("in", 0), ("in", 1)}) == []
    watch.rebalancing()  # the session was lost: partitions gone, on their way back
    assert [watch.check(set()) for _ in range(3)] == [[], [], []]
    assert _elsewhere(m) == 0
    watch.settled()  # the rebalance gave this learner only partition 0: partition 1 is someone else's
    assert watch.check({("in", 0)}) == [1] and _elsewhere(m) == 1


def test_a_partition_missing_for_less_than_the_grace_is_not_reported() -> None:
    m = Metrics()
    watch = WholeTopicWatch(_Metadata(3), "in", "g", m, every_s=0.0, grace_s=3600.0)
    watch.settled()
    assert watch.check({("in", 0)}) == [] and _elsewhere(m) == 0
