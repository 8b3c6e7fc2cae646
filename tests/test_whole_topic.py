"""The learner's check that it holds every input partition (:mod:`service.whole_topic`), on a stand-in for the
brokers' answer and on a real admin client whose brokers do not answer; ``tests/integration/test_learner.py`` runs
it against a real broker and a real second consumer."""

from __future__ import annotations

import time
from concurrent.futures import Future
from types import SimpleNamespace

from confluent_kafka.admin import AdminClient

from service.metrics import Metrics
from service.whole_topic import WholeTopicWatch


class _Metadata:
    """What ``AdminClient.describe_topics`` answers, at once, for a topic of ``n`` partitions."""

    def __init__(self, n: int, topic_id: str = "id-1") -> None:
        self.n, self.topic_id = n, topic_id

    def poll(self, timeout: float) -> int:
        return 0  # no log lines

    def describe_topics(self, topics: object, request_timeout: float) -> dict[str, Future[SimpleNamespace]]:
        answer: Future[SimpleNamespace] = Future()
        partitions = [SimpleNamespace(id=p) for p in range(self.n)]
        answer.set_result(SimpleNamespace(partitions=partitions, topic_id=self.topic_id))
        return {"in": answer}


def _check(watch: WholeTopicWatch, assigned: set[tuple[str, int]]) -> list[int]:
    """Two turns of the loop: one asks, the next takes the answer."""
    return watch.check(assigned) or watch.check(assigned)


def _elsewhere(m: Metrics) -> float:
    return m.errors.labels(kind="partitions_elsewhere")._value.get()


def test_partitions_count_as_elsewhere_only_after_an_assignment_and_the_grace() -> None:
    """A lost session (a broker stall) leaves the learner with nothing until it rejoins, which took 7 s on Tansu,
    longer than the grace at the tests' timeouts: the check warned of another consumer that did not exist. The
    clock now runs only after the learner's own last rebalance event was an assignment."""
    m = Metrics()
    watch = WholeTopicWatch(_Metadata(2), "in", "g", m, every_s=0.0, grace_s=0.0)
    assert _check(watch, set()) == []  # before the first assignment: joining
    watch.settled()
    assert _check(watch, {("in", 0), ("in", 1)}) == []
    watch.check(set())  # asked ...
    watch.rebalancing()  # ... when the session was lost: partitions gone, on their way back; the answer is dropped
    assert [_check(watch, set()) for _ in range(3)] == [[], [], []]
    assert _elsewhere(m) == 0
    watch.settled()  # the rebalance gave this learner only partition 0: partition 1 is someone else's
    assert _check(watch, {("in", 0)}) == [1] and _elsewhere(m) == 1


def test_a_partition_missing_for_less_than_the_grace_is_not_reported() -> None:
    m = Metrics()
    watch = WholeTopicWatch(_Metadata(3), "in", "g", m, every_s=0.0, grace_s=3600.0)
    watch.settled()
    assert _check(watch, {("in", 0)}) == [] and _elsewhere(m) == 0


def test_the_check_never_holds_the_loop_while_the_brokers_do_not_answer() -> None:
    """The first version asked ``list_topics`` on the batch loop and waited its 2 s timeout every 30 s while the
    brokers did not answer. Here a real admin client whose bootstrap address nobody listens on: every turn of the
    loop returns at once, however many are due."""
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9", "socket.connection.setup.timeout.ms": 60_000})
    watch = WholeTopicWatch(admin, "in", "g", Metrics(), every_s=0.0, grace_s=0.0)
    watch.settled()
    started = time.monotonic()
    for _ in range(5):
        assert watch.check({("in", 0)}) == []
    assert time.monotonic() - started < 1.0


def test_a_re_created_topic_is_said_so_and_no_other_consumer_is_blamed(caplog) -> None:  # type: ignore[no-untyped-def]
    """Brokers back without their data: the new input topic's partitions are nobody's until the consumer's next
    metadata refresh (5 minutes by default), and the check warned that "another consumer in its group" held them
    (a review: there was none)."""
    m = Metrics()
    watch = WholeTopicWatch(_Metadata(2, topic_id="id-2"), "in", "g", m, every_s=0.0, grace_s=0.0)
    watch.settled()
    assert watch.check(set(), "id-1") == [] and watch.check(set(), "id-1") == []  # asked, answered: id-2
    assert _elsewhere(m) == 0 and "re-created" in caplog.text and "another consumer" not in caplog.text
    assert watch.recreated == "id-2"  # the learner subscribes again (Learner._subscribe_again)
    watch.check(set(), "id-2")  # once it reads the new topic, a partition held elsewhere is said so again
    assert watch.check(set(), "id-2") == [0, 1] and _elsewhere(m) == 1 and watch.recreated is None
