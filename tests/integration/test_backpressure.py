"""An output broker that stops acknowledging: the worker stops reading input instead of holding batch after batch
in memory, and nothing is lost."""

from __future__ import annotations

import json
import threading
import time

import pytest

from service.kafka import DeliveryError, make_producer
from service.learner import Learner
from service.metrics import Metrics
from service.settings import Settings

from .helpers import committed, good_articles, produce, read_all, run_until, sample

pytestmark = pytest.mark.integration


def test_unacknowledged_outputs_stop_the_reading_and_lose_nothing(settings: Settings) -> None:
    """The learner's outputs go to a broker that never answers (nothing listens on 127.0.0.1:1; its sends give up
    after 6 s, the production default being never), its input comes from the real one. It reads three batches
    beyond the acknowledged ones (``max_unacked_batches``) plus the one its kernel is on, then waits, staying in
    its group; when the sends fail it stops without committing, and the next learner answers every article."""
    s = settings.model_copy(
        update={"batch_size": 10, "max_unacked_batches": 3, "snapshot_every_batches": 10**6, "snapshot_every_s": 3600}
    )
    values = good_articles(200, seed=3)
    produce(s, values)
    first = Learner(s)
    dead = make_producer(s.model_copy(update={"kafka_bootstrap": "127.0.0.1:1"}), **{"message.timeout.ms": 6000})
    first.producer = first.publisher.producer = dead
    failure: list[BaseException] = []

    def run() -> None:
        try:
            first.run()
        except BaseException as e:  # the delivery failure the test waits for
            failure.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    most_read, most_waiting = 0.0, 0.0
    deadline = time.monotonic() + 90
    while thread.is_alive() and time.monotonic() < deadline:
        most_read = max(most_read, sample(first.metrics, "topicstream_articles_consumed_total"))
        most_waiting = max(most_waiting, sample(first.metrics, "topicstream_batches_awaiting_ack"))
        time.sleep(0.05)
    thread.join(30)
    assert not thread.is_alive(), "the learner did not stop when its sends failed"
    assert failure and isinstance(failure[0], DeliveryError), failure
    assert most_waiting in (3, 4)  # the limit, and the batch the kernel was on when the reading stopped
    assert 30 <= most_read <= (3 + 1) * 10, most_read
    assert not committed(s, s.learner_group(), 2)  # nothing was acknowledged, so nothing was committed
    # The wait (6 s) outlasted max.poll.interval.ms (3 s): polling with the partitions paused kept the group.
    assert sample(first.metrics, "topicstream_errors_total", kind="partitions_lost") == 0

    second = Learner(s, metrics=Metrics())
    run_until(second, len(values))
    outputs = read_all(s, s.output_topic, len(values))
    assert {m.key().decode() for m in outputs} == {json.loads(v)["id"] for v in values}
