"""The process's own metrics (service/metrics.py), read back through the registry as Prometheus would."""

from __future__ import annotations

import time

from service.doctables import dead_letter_reasons
from service.metrics import ERROR_KINDS, Metrics
from service.schemas import REJECTION_REASONS


def sample(m: Metrics, name: str) -> float | None:
    return m.registry.get_sample_value(name)


def test_snapshot_gauges_and_age_follow_the_newest_snapshot_seen() -> None:
    m = Metrics("replica")
    m._started_at -= 40.0  # started 40 s ago, no snapshot seen yet: 40 s without one (not 0, not "55 years")
    assert 40.0 <= (sample(m, "topicstream_snapshot_age_seconds") or 0.0) < 60.0
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


def test_every_error_kind_and_rejection_reason_starts_at_zero() -> None:
    """A counter that first appears at 1 is no increase to Prometheus's rate() and increase(): the first burst of
    a new dead-letter reason would not count towards TopicstreamDeadLetterSpike. Every reason decode_article can
    return (read from its code) and every error kind has its series at 0 from the start."""
    assert set(dead_letter_reasons()) == set(REJECTION_REASONS)
    m = Metrics("learner")
    for reason in REJECTION_REASONS:
        for name in ("topicstream_articles_dead_lettered_total", "topicstream_articles_rejected_total"):
            assert m.registry.get_sample_value(name, {"reason": reason}) == 0.0, (name, reason)
    for kind in ERROR_KINDS:
        assert m.registry.get_sample_value("topicstream_errors_total", {"kind": kind}) == 0.0, kind


def test_the_topic_slots_are_those_of_the_model_described() -> None:
    m = Metrics("learner")
    m.describe_model("ohdp", 150, 65536)
    assert sample(m, "topicstream_topic_slots") == 150
    assert sample(m, "topicstream_vocabulary_capacity_words") == 65536


def _topics(m: Metrics, name: str) -> dict[str, float]:
    return {s.labels["topic"]: s.value for metric in m.registry.collect() for s in metric.samples if s.name == name}


def test_topic_series_are_those_of_the_topics_in_use() -> None:
    """Births reuse slots whose old id had no retire event of its own (retirement is off by default): the old
    id's series go with it, so 100 births on 5 slots leave 5 series of each gauge, not 105."""
    m = Metrics("learner")
    ids = [0, 1, 2, 3, 4]
    m.set_topics(ids, prevalence=[0.2] * 5, drift=[0.0] * 5)
    for new_id in range(5, 105):
        ids[new_id % 5] = new_id  # a birth into slot new_id % 5
        m.set_topics(ids, prevalence=[0.1, 0.2, 0.3, 0.2, 0.2])  # the batch loop: prevalence only
        m.set_topics(ids, drift=[0.01] * 5)  # the snapshot writer: drift only
    assert _topics(m, "topicstream_topic_prevalence") == {"100": 0.1, "101": 0.2, "102": 0.3, "103": 0.2, "104": 0.2}
    assert set(_topics(m, "topicstream_topic_drift")) == {"100", "101", "102", "103", "104"}


def test_the_heartbeat_starts_at_the_process_start() -> None:
    before = time.time()
    m = Metrics("learner")
    assert before <= (sample(m, "topicstream_loop_heartbeat_timestamp_seconds") or 0.0) <= time.time()


def test_healthz_fails_once_the_loop_stalls_and_metrics_are_served_beside_it() -> None:
    """A liveness probe on /metrics passes while the batch loop hangs (the server has its own thread): /healthz
    answers 503 once the heartbeat is older than the TopicstreamLoopStalled line, 200 before and for a standby."""
    import urllib.error
    import urllib.request

    from service.dev.localstack import free_port
    from service.health import STALE_S

    m = Metrics("learner")
    port = free_port()
    m.serve(port, "127.0.0.1")

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    assert get("/healthz")[0] == 200
    m._beat_at = time.monotonic() - STALE_S - 60  # the last turn, 6 minutes ago
    status, why = get("/healthz")
    assert status == 503 and "has not turned for 36" in why
    m.standby.set(1)  # a standby learner has no loop yet
    assert get("/healthz")[0] == 200
    status, text = get("/metrics")
    assert status == 200 and "topicstream_loop_heartbeat_timestamp_seconds" in text


def test_healthz_times_the_loop_on_the_monotonic_clock_not_the_wall_clock() -> None:
    """An NTP step moves the heartbeat gauge's age (Unix time) but not the loop's: a step forward must not fail a
    loop that just turned, and a loop that hangs after a step back must fail after STALE_S, not STALE_S plus the
    step (the gauge stands for both steps here: it is what a wall-clock age would be read from)."""
    from service.health import STALE_S, health

    m = Metrics("learner")
    m.beat()
    m.heartbeat.set(time.time() - 400)  # as if the wall clock had stepped 400 s forward since the beat
    assert health(m.registry, m.beat_age()) == (True, "the batch loop turned 0 s ago")
    m.heartbeat.set(time.time() + 3600)  # stepped an hour back since the beat ...
    m._beat_at = time.monotonic() - STALE_S - 1  # ... and the loop has hung since
    ok, why = health(m.registry, m.beat_age())
    assert not ok and "has not turned for 301 s" in why
