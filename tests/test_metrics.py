"""The process's own metrics (service/metrics.py), read back through the registry as Prometheus would."""

from __future__ import annotations

import time

from service.metrics import Metrics


def sample(m: Metrics, name: str) -> float | None:
    return m.registry.get_sample_value(name)


def test_snapshot_gauges_and_age_follow_the_newest_snapshot_seen() -> None:
    m = Metrics("replica")
    assert sample(m, "topicstream_snapshot_age_seconds") == 0.0  # none seen yet: no age, not "55 years"
    created = time.time() - 30.0
    m.snapshot_seen(7, created, 1234)
    assert sample(m, "topicstream_snapshot_version") == 7
    assert sample(m, "topicstream_snapshot_timestamp_seconds") == created
    assert sample(m, "topicstream_snapshot_size_bytes") == 1234
    assert 29.0 <= (sample(m, "topicstream_snapshot_age_seconds") or 0.0) < 60.0
    m.snapshot_seen(8, time.time())  # a restored snapshot: its size is not known, the last one stays
    assert sample(m, "topicstream_snapshot_version") == 8
    assert sample(m, "topicstream_snapshot_size_bytes") == 1234
    assert (sample(m, "topicstream_snapshot_age_seconds") or 0.0) < 5.0


def test_the_topic_slots_are_those_of_the_model_described() -> None:
    m = Metrics("learner")
    m.describe_model("ohdp", 150, 65536)
    assert sample(m, "topicstream_topic_slots") == 150
    assert sample(m, "topicstream_vocabulary_capacity_words") == 65536
