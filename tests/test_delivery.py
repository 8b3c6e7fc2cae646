"""Delivery bookkeeping that serves a whole live feed remembers a bounded number of failures."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from service.kafka import KEEP_FAILURES, DeliveryError, DeliveryTracker
from service.source import Tally


class _Sent:
    """What a delivery report names: the message's topic."""

    def topic(self) -> str:
        return "articles"


def test_a_tracker_counts_every_failure_and_keeps_the_first_few() -> None:
    tracker = DeliveryTracker()
    for _ in range(1000):
        tracker.sent()
    for i in range(1000):
        err = KafkaError(KafkaError._MSG_TIMED_OUT) if i % 2 else None
        tracker.callback(err, _Sent())  # type: ignore[arg-type]
    assert tracker.done and tracker.acked == 500 and tracker.failed == 500
    assert len(tracker.failures) == KEEP_FAILURES
    with pytest.raises(DeliveryError, match=r"^500 message"):
        tracker.raise_on_failure()


def test_skipped_lines_are_counted_and_the_first_few_named() -> None:
    tally = Tally()
    for line in range(1, 10_001):
        tally.skip(line)
    assert tally.skipped == 10_000 and tally.first == list(range(1, KEEP_FAILURES + 1))
