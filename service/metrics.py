"""Prometheus metrics of the learner and the replicas.

Names follow the Prometheus conventions: a ``topicstream_`` prefix, base units (seconds, bytes), ``_total`` for
counters. Each process owns one :class:`Metrics` with its own registry, so tests can run several in one process.
The Grafana dashboard in ``deploy/grafana`` and the README's metric table use exactly these names.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Sequence
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from . import __version__, health
from .schemas import REJECTION_REASONS

__all__ = ["Metrics"]

#: Up to 10 minutes: a backlog after a restart or a broker outage is measured, not cut off at the last bucket.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


#: The kinds of ``topicstream_errors_total`` the service reports.
ERROR_KINDS = (
    "consume",
    "commit",
    "partitions_lost",
    "watermarks",
    "redis",
    "fenced",
    "summary",
    "dead_letter_refused",
    "lineage",
    "input_recreated",
    "tokenizer",
    "partitions_elsewhere",
    "output_slimmed",
    "group_stalled",
)


class Metrics:
    """All series of one process (learner or replica)."""

    def __init__(self, role: str = "learner", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.info = Info(
            "topicstream_model", "Algorithm, number of topics, role and version of the process", registry=r
        )
        # Every series below is registered in this process's registry.
        counter = partial(Counter, registry=r)
        gauge = partial(Gauge, registry=r)
        histogram = partial(Histogram, registry=r)
        self.role = role
        self._snapshot_created_at = 0.0  # of the newest snapshot seen (snapshot_seen), for the age gauge
        self._started_at = time.time()  # the age gauge counts from here until the first snapshot
        self._topic_labels: set[str] = set()  # topic ids with prevalence/drift series (set_topics)
        self._topic_lock = threading.Lock()  # the batch loop and the snapshot writer both set them

        # Throughput.
        self.consumed = counter("topicstream_articles_consumed_total", "Messages read from the input topic")
        self.published = counter(
            "topicstream_articles_published_total", "Topic mixtures acknowledged by the broker on the output topic"
        )
        self.dead_lettered = counter(
            "topicstream_articles_dead_lettered_total", "Messages sent to the dead-letter topic, by reason", ["reason"]
        )
        self.rejected = counter(
            "topicstream_articles_rejected_total",
            "Invalid messages a replica skipped (the learner dead-letters them), by reason",
            ["reason"],
        )
        self.tokens = counter("topicstream_tokens_total", "In-vocabulary tokens processed by the kernel")
        self.oov_tokens = counter(
            "topicstream_oov_tokens_total", "Tokens dropped because their word holds no vocabulary slot"
        )
        self.wordless = counter(
            "topicstream_articles_without_words_total",
            "Valid articles none of whose words holds a vocabulary slot: published with the prior's mixture and no "
            "topic (text only of stop words or of words too new to have a slot, or in a script written without "
            "spaces between words, which the tokenizer cannot split: README, Events)",
        )
        self.duplicates = counter(
            "topicstream_articles_duplicate_total",
            "Articles whose text the learner learned among its last TOPICSTREAM_DUPLICATE_WINDOW texts: published "
            "with the model's mixture, not learned again",
        )
        self.batches = counter("topicstream_batches_total", "Batches processed")

        self.api_requests = counter(
            "topicstream_api_requests_total",
            "Requests of a replica's HTTP inference API (TOPICSTREAM_API_PORT), by status code (a body over "
            "TOPICSTREAM_API_MAX_BYTES is refused by the server before it counts)",
            ["status"],
        )

        # Latency.
        self.batch_duration = histogram(
            "topicstream_batch_duration_seconds",
            "Time to process one batch, by stage (decode, tokenize, kernel, publish, commit; snapshot: what taking "
            "a snapshot held the batch loop up for)",
            ["stage"],
            buckets=_DURATION_BUCKETS,
        )
        self.api_duration = histogram(
            "topicstream_api_request_duration_seconds",
            "Time to answer one request of a replica's HTTP inference API",
            buckets=_DURATION_BUCKETS,
        )
        self.latency = histogram(
            "topicstream_end_to_end_latency_seconds",
            "From the input message's timestamp (the broker's; its producer's when within the hour before it was read, "
            "else when it was read) to the broker's acknowledgement of its output",
            buckets=_LATENCY_BUCKETS,
        )
        self.lag = gauge(
            "topicstream_consumer_lag_messages",
            "High watermark minus the consumer's position, per input partition",
            ["topic", "partition"],
        )
        self.heartbeat = gauge(
            "topicstream_loop_heartbeat_timestamp_seconds",
            "Unix time the batch loop last finished a turn, with or without messages, or a piece of a batch too "
            "large for one kernel call, or last polled while it holds input (awaiting the broker's "
            "acknowledgements, or the snapshot of new topic ids): a loop that hangs while /metrics still answers "
            "stops it (/healthz then fails). Before the first turn: the last step of "
            "the start (a learner's restore or compile, a standby's taking the lease; a replica waiting for the "
            "first snapshot beats every second)",
        )
        self.heartbeat.set(self._started_at)
        self._beat_at = time.monotonic()  # the same moment on the clock /healthz reads (beat, beat_age)
        self.unacked_batches = gauge(
            "topicstream_batches_awaiting_ack",
            "Published batches whose outputs the broker has not yet acknowledged all of; at max_unacked_batches "
            "the worker stops reading input until some are",
        )
        self.unacked_limit = gauge(
            "topicstream_batches_awaiting_ack_limit",
            "max_unacked_batches: at this many batches awaiting acknowledgements the worker reads no input",
        )

        # Snapshots (learner writes, replicas read).
        self.snapshot_duration = histogram(
            "topicstream_snapshot_duration_seconds",
            "Time to write (learner: describe and write, not the hygiene plan or the wait for the batch's outputs to "
            "be acknowledged) or load (replica) one snapshot",
            buckets=_DURATION_BUCKETS,
        )
        self.snapshot_size = gauge("topicstream_snapshot_size_bytes", "Size of the newest snapshot written or loaded")
        self.snapshot_version = gauge(
            "topicstream_snapshot_version", "Version of the newest snapshot written or loaded"
        )
        self.snapshot_timestamp = gauge(
            "topicstream_snapshot_timestamp_seconds", "Unix time of the newest snapshot written or loaded"
        )
        self.snapshot_age = gauge(
            "topicstream_snapshot_age_seconds",
            "Seconds since the newest snapshot was written (before this process saw one: since it started)",
        )
        self.snapshot_age.set_function(self._snapshot_age)
        self.snapshot_failures = counter(
            "topicstream_snapshot_failures_total",
            "Snapshot writes that failed (learner; a replica counts unreadable versions in "
            "topicstream_snapshot_fallbacks_total and Redis errors in topicstream_errors_total)",
        )
        self.hygiene_plan_duration = histogram(
            "topicstream_topic_hygiene_plan_seconds",
            "Time the snapshot writer spent planning topic hygiene on a snapshot's copy (learner; not part of "
            "topicstream_snapshot_duration_seconds): docs/topic-hygiene.md",
            buckets=_DURATION_BUCKETS,
        )

        # The model.
        self.vocabulary_words = gauge("topicstream_vocabulary_words", "Words currently holding a vocabulary slot")
        self.vocabulary_capacity = gauge("topicstream_vocabulary_capacity_words", "Vocabulary slots (the kernel's W)")
        self.vocabulary_recycled = counter(
            "topicstream_vocabulary_recycled_total", "Slots taken from a fading word and given to a new one"
        )
        self.topic_prevalence = gauge(
            "topicstream_topic_prevalence", "Corpus-level weight of each topic (sums to 1)", ["topic"]
        )
        self.topic_drift = gauge(
            "topicstream_topic_drift",
            "Hellinger distance of each topic's word distribution from the previous snapshot's",
            ["topic"],
        )
        self.model_drift = gauge(
            "topicstream_model_drift",
            "Prevalence-weighted mean Hellinger distance of the topics since the previous snapshot",
        )
        self.topics_used = gauge("topicstream_topics_used", "Topics holding at least 1% of the corpus weight")
        self.topics_holding = gauge(
            "topicstream_topics_holding_mass",
            "The fewest topics holding 95% of the corpus weight (ohdp: above 0.8 of topicstream_topic_slots, or with "
            "topicstream_topics_used at 0.9 of them, the truncation limits the number of topics: docs/ohdp.md)",
        )
        self.topic_slots = gauge("topicstream_topic_slots", "Topic slots K (ohdp: the truncation)")
        self.background_topic = gauge(
            "topicstream_background_topic",
            "Id of the background topic (the words every article uses: TopicModel.background_topic), -1 if none",
        )
        self.background_topic.set(-1)
        self.kernel_stat = gauge(
            "topicstream_kernel_stat", "Kernel diagnostics (step size, ESS, resamplings, reservoir fill, ...)", ["stat"]
        )
        self.topic_events = counter(
            "topicstream_topic_events_total",
            "Lineage events by kind (merge, split, birth, retire): topic hygiene's moves, and the fresh ids of topics "
            "that changed meaning without one (births): docs/topic-hygiene.md",
            ["kind"],
        )
        for kind in ("merge", "split", "birth", "retire"):
            self.topic_events.labels(kind=kind)
        self.standby = gauge(
            "topicstream_learner_standby",
            "1 while this learner waits as a standby for the active learner's lease, else 0",
        )
        self.lease_token = gauge("topicstream_learner_fencing_token", "Fencing token of the lease this learner holds")
        self.snapshot_fallbacks = counter(
            "topicstream_snapshot_fallbacks_total",
            "Unreadable snapshot versions skipped in favour of an older readable one",
        )
        self.errors = counter(
            "topicstream_errors_total",
            "Errors met and survived, by kind (consume, commit, redis, fenced, watermarks, ...)",
            ["kind"],
        )
        # Known kinds and reasons start at 0, so dashboards and alerts see a series (rate 0) before the first
        # error, and the first one is an increase (a counter that appears at 1 is none to rate() and increase()).
        for kind in ERROR_KINDS:
            self.errors.labels(kind=kind)
        for reason in REJECTION_REASONS:
            self.dead_lettered.labels(reason=reason)
            self.rejected.labels(reason=reason)

    def snapshot_seen(self, version: int, created_at: float, size_bytes: int | None = None) -> None:
        """The newest snapshot written (learner), restored (learner) or loaded (replica): its version, time and,
        when known, size; the age gauge counts from ``created_at``."""
        self._snapshot_created_at = created_at
        self.snapshot_version.set(version)
        self.snapshot_timestamp.set(created_at)
        if size_bytes is not None:
            self.snapshot_size.set(size_bytes)

    def _snapshot_age(self) -> float:
        ts = self._snapshot_created_at
        return max(0.0, time.time() - (ts if ts > 0 else self._started_at))

    def set_topics(
        self, ids: Sequence[int], prevalence: Iterable[float] | None = None, drift: Iterable[float] | None = None
    ) -> None:
        """The per-topic gauges of the topics with stable ``ids`` (slot order): ``prevalence`` and ``drift`` of
        each, where given. The series of ids no longer in ``ids`` are removed, whatever ended them (a merge, a
        retirement, a birth or split into a slot whose old id had no event of its own), so the label sets stay
        those of the K topics in use rather than of every id the stream has seen."""
        labels = [str(i) for i in ids]
        gauges = (self.topic_prevalence, self.topic_drift)
        with self._topic_lock:
            for gone in self._topic_labels.difference(labels):
                for gauge in gauges:
                    with contextlib.suppress(KeyError):  # a series never set for this id
                        gauge.remove(gone)
            self._topic_labels = set(labels)
            for gauge, values in zip(gauges, (prevalence, drift), strict=True):
                if values is not None:
                    for label, value in zip(labels, values, strict=True):
                        gauge.labels(topic=label).set(float(value))

    def describe_model(self, algorithm: str, n_topics: int, capacity: int) -> None:
        self.info.info({"algorithm": algorithm, "topics": str(n_topics), "role": self.role, "version": __version__})
        self.topic_slots.set(n_topics)
        self.vocabulary_capacity.set(capacity)

    def beat(self) -> None:
        """The batch loop turned (or made progress): the heartbeat gauge, Unix time for Prometheus and its alert,
        and the monotonic time ``/healthz`` measures the age from, so that a step of the wall clock (an NTP
        correction) neither fails a healthy loop nor hides a hung one for as long as the step."""
        self._beat_at = time.monotonic()
        self.heartbeat.set(time.time())

    def beat_age(self) -> float:
        """Seconds since the last :meth:`beat` (or since this object was made), on the monotonic clock."""
        return time.monotonic() - self._beat_at

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` and ``/healthz`` (:mod:`service.health`) on ``port`` (0 = do not serve)."""
        if port:
            health.serve(self.registry, port, addr, beat_age=self.beat_age)
