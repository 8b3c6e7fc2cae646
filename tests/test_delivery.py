"""Delivery bookkeeping that serves a whole live feed remembers a bounded number of failures; when an output's
end-to-end latency starts."""

from __future__ import annotations

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    Message,
)

from service.kafka import KEEP_FAILURES, DeliveryError, DeliveryTracker
from service.pipeline import MAX_CREATE_AGE_S, latency_start
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


def test_latency_counts_from_a_producers_timestamp_only_when_it_is_a_plausible_send_time() -> None:
    """A producer may stamp an article with its own time (its publication, a replay that keeps the originals): an
    article stamped 1970 had a latency of 56 years (its p99 alone fires TopicstreamHighLatency), one stamped ahead
    of the clock 0 s. The broker's time (LogAppendTime) is always taken."""
    now = 1_800_000_000.0

    def start(kind: int, seconds: float) -> float:
        return latency_start(Message(topic="a", value=b"x", timestamp=(kind, int(seconds * 1000))), now)

    assert start(TIMESTAMP_CREATE_TIME, now - 2.5) == now - 2.5  # sent 2.5 s before it was read
    assert start(TIMESTAMP_CREATE_TIME, now - MAX_CREATE_AGE_S - 1) == now  # an article's own time, not a send
    assert start(TIMESTAMP_CREATE_TIME, 1.0) == now
    assert start(TIMESTAMP_CREATE_TIME, now + 60) == now  # ahead of the clock
    assert start(TIMESTAMP_LOG_APPEND_TIME, now - 7200) == now - 7200  # the broker's: a real two-hour backlog
    assert start(TIMESTAMP_NOT_AVAILABLE, 0) == now
