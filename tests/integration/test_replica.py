"""Read replicas serve mixtures from the learner's snapshots and follow new versions."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from service.inflight import InFlight
from service.kafka import ensure_topics
from service.learner import Learner
from service.metrics import Metrics
from service.replica import Replica
from service.schemas import TopicEvent
from service.settings import Settings
from service.snapshot import SnapshotStore

from .helpers import good_articles, produce, read_all, run_until, sample

pytestmark = pytest.mark.integration


def test_replica_serves_the_snapshot_and_reloads(settings: Settings) -> None:
    s = settings
    first = good_articles(80, seed=4)
    produce(s, first)
    learner = Learner(s)
    run_until(learner, len(first))
    v1 = learner.version
    assert v1 >= 1

    rs = s.model_copy(update={"output_topic": s.output_topic + "-replica"})
    ensure_topics(rs, {rs.output_topic: 1})
    replica = Replica(rs)
    assert replica.reload()
    replica.between_batches(None)  # the loop switches models between batches
    assert replica.version == v1
    stop = threading.Event()
    thread = threading.Thread(target=replica.run, args=(stop,), daemon=True)
    thread.start()
    try:
        outputs = read_all(rs, rs.output_topic, len(first))
        assert sorted(m.key().decode() for m in outputs) == sorted(json.loads(v)["id"] for v in first)
        for m in outputs:
            event = TopicEvent.model_validate_json(m.value())
            assert event.model.version == v1 and abs(sum(event.mixture) - 1) < 1e-4

        # The learner moves on; the replica picks up the new version without a restart.
        produce(s, good_articles(40, seed=5))
        learner2 = Learner(s)
        run_until(learner2, 40)
        assert learner2.version > v1
        deadline = time.monotonic() + 30
        while replica.version < learner2.version and time.monotonic() < deadline:
            time.sleep(0.2)
        assert replica.version == learner2.version
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    # Replicas never change the model they serve.
    assert replica.model is not None and replica.model.n_docs_seen_ == 120


def test_a_snapshot_that_does_not_make_a_model_is_skipped_and_versions_that_go_back_are_followed(
    settings: Settings,
) -> None:
    """A snapshot whose bytes pass their checksum but do not make a model (a vocabulary in a shape this version
    cannot read) is unreadable, not a Redis outage: the replica falls back to the previous version at once.
    And when Redis loses its data and a learner without state starts over at version 1, the replica follows it
    instead of serving its old model until the new versions pass the old number."""
    s = settings
    produce(s, good_articles(40, seed=51))
    run_until(Learner(s), 40)
    store = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix)
    good = store.latest_version()
    assert good is not None
    _, original = store.load(good)
    payload = {**original, "vocabulary": {**original["vocabulary"], "candidates": ["not", "two", "arrays"]}}
    bad = store.save(payload, min_version=good).version
    replica = Replica(s)
    assert replica.reload()
    replica.between_batches(None)
    assert replica.version == good < bad
    assert sample(replica.metrics, "topicstream_errors_total", kind="redis") == 0
    assert sample(replica.metrics, "topicstream_snapshot_fallbacks_total") == 1

    newer = store.save(original, min_version=bad).version
    assert replica.reload()
    assert sample(replica.metrics, "topicstream_snapshot_version") == good  # loaded, not served yet
    replica.between_batches(None)
    assert replica.version == newer == 3 == sample(replica.metrics, "topicstream_snapshot_version")
    for key in store.r.scan_iter(f"{s.redis_prefix}:*"):  # Redis lost this prefix's data ...
        store.r.delete(key)
    assert store.save(original).version == 1
    assert replica.reload()  # ... and a learner started over at version 1
    replica.between_batches(None)
    assert replica.version == 1


class _SlowReplica(Replica):
    """A replica whose first ``slow`` kernel calls take ``seconds`` longer: longer than ``max.poll.interval.ms``."""

    def __init__(self, settings: Settings, slow: int, seconds: float) -> None:
        super().__init__(settings)
        self.slow, self.seconds = slow, seconds
        self.in_slow_call = threading.Event()

    def compute(self, batch: InFlight) -> np.ndarray:
        if self.slow > 0:
            self.slow -= 1
            self.in_slow_call.set()
            time.sleep(self.seconds)
        return super().compute(batch)


def _ids(values: list[bytes]) -> list[str]:
    return [json.loads(v)["id"] for v in values]


def test_a_replica_joining_and_leaving_during_a_long_kernel_call_loses_and_repeats_nothing(
    settings: Settings,
) -> None:
    """Replica A's first kernel call outlasts ``max.poll.interval.ms`` (8 s against 3 s), so it waits in its
    keep-alive polls with its partitions paused; replica B joins the group meanwhile and takes partition 0 away
    from A (the rebalance runs inside A's keep-alive poll), reads some of it and leaves, and partition 0 comes back
    to A. Every article, also those written after B left, gets exactly one mixture. Without the resume on
    unassign, partition 0 comes back to A paused and the articles written after B left never get one (this test
    fails so). A also drops the messages of partition 0 from the batch it had consumed before the rebalance (the
    next owner reads them from the committed offset); on Tansu, B's assignment completes only after A's commit of
    that batch, so keeping them would not show here as a duplicate."""
    s = settings
    produce(s, good_articles(60, seed=11))
    run_until(Learner(s), 60)  # a snapshot to serve
    rs = s.model_copy(update={"output_topic": s.output_topic + "-replica", "batch_size": 150})
    ensure_topics(rs, {rs.output_topic: 1})
    before = [good_articles(600, seed=12), good_articles(20, seed=13)]
    for p, values in enumerate(before):
        produce(s, values, partition=p)
    a = _SlowReplica(rs, slow=1, seconds=8.0)
    b = Replica(rs, metrics=Metrics("replica"))
    stop_a, stop_b = threading.Event(), threading.Event()
    thread_a = threading.Thread(target=a.run, args=(stop_a,), daemon=True)
    thread_b = threading.Thread(target=b.run, args=(stop_b,), daemon=True)
    thread_a.start()
    try:
        assert a.in_slow_call.wait(60)
        thread_b.start()
        deadline = time.monotonic() + 60
        while sample(b.metrics, "topicstream_articles_consumed_total") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sample(b.metrics, "topicstream_articles_consumed_total") > 0, "B was never given a partition"
        stop_b.set()
        thread_b.join(60)
        after = [good_articles(50, seed=20 + p) for p in (0, 1)]
        for p, values in enumerate(after):
            produce(s, values, partition=p)
        expected = _ids([v for vs in before + after for v in vs]) + _ids(good_articles(60, seed=11))
        outputs = read_all(rs, rs.output_topic, len(expected), timeout=120)
    finally:
        stop_a.set()
        stop_b.set()
        thread_a.join(60)
        thread_b.join(60)
    assert not thread_a.is_alive() and not thread_b.is_alive()
    ids = [m.key().decode() for m in outputs]
    assert set(ids) == set(expected)
    assert len(ids) == len(set(ids)), "an article got two mixtures"


def test_a_replica_waiting_for_the_first_snapshot_keeps_its_heartbeat(settings: Settings) -> None:
    """A new install: no learner has written a snapshot yet. The waiting replica is alive, not stalled, so its
    heartbeat moves (before, it stood at the start time and TopicstreamLoopStalled paged on every replica)."""
    rs = settings.model_copy(update={"redis_prefix": settings.redis_prefix + "-empty"})
    replica = Replica(rs, metrics=Metrics("replica"))
    started = sample(replica.metrics, "topicstream_loop_heartbeat_timestamp_seconds")
    stop = threading.Event()
    thread = threading.Thread(target=replica.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while sample(replica.metrics, "topicstream_loop_heartbeat_timestamp_seconds") < started + 2:
            assert time.monotonic() < deadline, "the heartbeat stood still while the replica waited"
            time.sleep(0.2)
        assert replica.served is None
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


@pytest.mark.timeout(180)  # the old revocation never returned
def test_a_revocation_lets_the_partitions_go_while_the_outputs_wait_for_the_broker(settings: Settings) -> None:
    """The broker does not acknowledge a replica's outputs (here: its producer's broker never answers) when its
    partitions are revoked. It commits nothing past the unacknowledged batch and lets the partitions go after a
    third of ``max.poll.interval.ms`` (5 s at least): the rebalance and the loop go on, and the next owner reads
    that batch again. Before, the revocation waited inside the poll for as long as the broker took (here: for
    ever), with no heartbeat, so the liveness probe restarted the replica, and a restarted member revoked the
    others' again."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from service.dev.localstack import free_port

    s = settings
    produce(s, good_articles(60, seed=8))
    run_until(Learner(s), 60)  # a snapshot to serve
    rs = s.model_copy(update={"output_topic": s.output_topic + "-held", "group_id": s.group_id + "-held"})
    ensure_topics(rs, {rs.output_topic: 1})
    replica = Replica(rs, metrics=Metrics("replica"))
    assert replica.reload()
    replica.between_batches(None)
    replica.subscribe()
    nowhere = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "client.id": "nowhere"})
    replica.producer = replica.publisher.producer = nowhere  # a real producer: its sends are never acknowledged
    try:
        deadline = time.monotonic() + 60
        while not replica.step(limit=20):
            assert time.monotonic() < deadline, "no batch consumed"
        replica.drain()  # learned and sent: waiting for acknowledgements that never come
        assert replica.assigned
        t0 = time.monotonic()
        replica.consumer.unsubscribe()  # the revocation runs in the next poll
        while replica.assigned and time.monotonic() - t0 < 60:
            replica.consumer.poll(0.2)
        took = time.monotonic() - t0
        assert not replica.assigned, "the partitions were never let go"
        assert took < max(5.0, rs.max_poll_interval_ms / 3000) + 10
        assert replica._unacked  # the batch is still unacknowledged, so nothing of it is committed
        # ... nor later, once acknowledged: the partitions may be another member's, further on.
        assert all(not batch.next_offsets for batch in replica._unacked)
        probe = Consumer({"bootstrap.servers": rs.kafka_bootstrap, "group.id": rs.replica_group()})
        try:
            parts = probe.list_topics(rs.input_topic, timeout=10).topics[rs.input_topic].partitions
            committed = probe.committed([TopicPartition(rs.input_topic, p) for p in parts], timeout=10)
        finally:
            probe.close()
        assert committed and all(tp.offset < 0 for tp in committed)  # none: the next owner reads the batch again
    finally:
        replica.consumer.close()
        replica.lane.shutdown()
        nowhere.purge()  # its sends are never acknowledged: close() would wait for them, and it retried for minutes
        nowhere.close()


def test_a_replica_that_tokenizes_otherwise_than_the_learner_says_so(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot carries the learner's tokenizer fingerprint; a replica given another stop-word file (or another
    version during a rolling upgrade) would look up words the model never learned without a word. It serves the
    snapshot, warns once naming both fingerprints and counts ``errors_total{kind="tokenizer"}``; a replica that
    tokenizes alike counts nothing."""
    s = settings
    produce(s, good_articles(40, seed=61))
    learner = Learner(s)
    run_until(learner, 40)
    (tmp_path / "stop.txt").write_text("market shares\n", encoding="utf-8")
    alike, other = Replica(s), Replica(s.model_copy(update={"stop_words_file": tmp_path / "stop.txt"}))
    try:
        for replica in (alike, other):
            assert replica.reload()
            replica.between_batches(None)  # the loop switches models between batches
        assert alike.metrics.errors.labels(kind="tokenizer")._value.get() == 0
        assert other.metrics.errors.labels(kind="tokenizer")._value.get() == 1
        said = [r.getMessage() for r in caplog.records if "another tokenizer" in r.getMessage()]
        assert len(said) == 1 and learner.tokenizer.fingerprint() in said[0]
        assert other.tokenizer.fingerprint() in said[0] and other.version == learner.version
    finally:
        for replica in (alike, other):
            replica.consumer.close()
            replica.lane.shutdown()


def test_a_snapshot_of_a_learner_older_than_the_fingerprint_counts_as_another_tokenizer(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A learner older than the fingerprints normalised no text (a soft hyphen split a word in three there), and
    its snapshots record no fingerprint. During a rolling upgrade a new replica serving them read a quarter fewer
    known words and gave 269 of 1,198 articles another main topic without a word: now it warns once and counts
    the snapshot as another tokenizer's; a new learner restoring it says so too."""
    s = settings
    produce(s, good_articles(30, seed=62))
    learner = Learner(s)
    run_until(learner, 30)
    learner.close()
    store = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix)
    loaded = store.load()
    assert loaded is not None
    meta, payload = loaded
    del payload["tokenizer"]  # as the older learner wrote it
    older = store.save(payload, {k: meta[k] for k in ("algorithm", "topics", "articles_learned")}).version
    replica = Replica(s)
    try:
        assert replica.reload()
        replica.between_batches(None)  # the loop switches models between batches
        assert replica.version == older
        assert replica.reload() is False  # nothing newer: counted and told once per snapshot loaded
        assert replica.metrics.errors.labels(kind="tokenizer")._value.get() == 1
        said = [r.getMessage() for r in caplog.records if "records no tokenizer" in r.getMessage()]
        assert said == [f"snapshot {older} records no tokenizer: its learner is older than this replica and may make "
                        "other words of text with soft hyphens, ligatures or zero-width characters; upgrade the "
                        "learner too"]  # fmt: skip
    finally:
        replica.consumer.close()
        replica.lane.shutdown()
    restarted = Learner(s)
    try:
        said = [r.getMessage() for r in caplog.records if "none recorded: an older version" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(f"snapshot {older} was learned with another tokenizer")
    finally:
        restarted.abandon()
