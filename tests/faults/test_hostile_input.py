"""A hostile message must never stop the stream: every bad one is dead-lettered with a reason, every good one
answered, and the learner keeps running. Judged only by what comes out of Kafka (ids compared as sets)."""

from __future__ import annotations

import threading

import pytest

from service.learner import Learner
from service.pipeline import (
    H_ORIGINAL_BYTES,
    H_ORIGINAL_SHA256,
    H_REASON,
    H_TRUNCATED,
    MAX_OUTPUT_TITLE_CHARS,
)
from service.schemas import TopicEvent
from service.settings import Settings
from tests.faults.hostile import hostile_cases
from tests.integration.helpers import produce_keyed, read_all

pytestmark = pytest.mark.integration

REASONS = {"not_utf8", "not_json", "not_object", "invalid", "oversize"}


def _run(learner: Learner) -> tuple[threading.Event, threading.Thread, list[BaseException]]:
    stop, errors = threading.Event(), []

    def target() -> None:
        try:
            learner.run(stop)
        except BaseException as e:  # the test fails on any exception that leaves the loop
            errors.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return stop, thread, errors


def test_ten_thousand_hostile_inputs_no_crash_no_stall_nothing_lost(settings: Settings) -> None:
    s = settings.model_copy(update={"max_article_bytes": 50_000, "batch_size": 500})
    cases = list(hostile_cases(10_000, seed=2026, max_bytes=s.max_article_bytes))
    produce_keyed(s, [(key, value) for key, value, _ in cases])
    good = {key for key, _, ok in cases if ok}
    bad = {key for key, _, ok in cases if not ok}
    assert len(good) > 3000 and len(bad) > 5000

    learner = Learner(s)
    stop, thread, errors = _run(learner)
    outputs = read_all(s, s.output_topic, len(good), timeout=240)
    dead = read_all(s, s.dlq_topic, len(bad), timeout=60)
    assert thread.is_alive() and not errors, errors
    stop.set()
    thread.join(60)
    assert not errors, errors

    out_keys = [m.key() for m in outputs]
    dead_keys = [m.key() for m in dead]
    assert set(out_keys) == good  # every good article answered ...
    assert set(dead_keys) == bad  # ... every bad one dead-lettered ...
    # At least once allows a duplicate after a rebalance (a busy machine can cost the learner its group session);
    # nothing here may be lost, and nothing may be both answered and dead-lettered.
    assert not set(out_keys) & set(dead_keys)
    for m in dead:
        headers = dict(m.headers())
        assert headers[H_REASON].decode() in REASONS
    for m in outputs:
        event = TopicEvent.model_validate_json(m.value())
        assert event.id == m.key().decode()
        assert event.title is None or len(event.title) <= MAX_OUTPUT_TITLE_CHARS


def test_dead_letters_are_bounded_and_never_refused(settings: Settings) -> None:
    """A dead letter larger than TOPICSTREAM_DLQ_MAX_BYTES is cut (and says so); one the producer refuses even so
    (here: its message.max.bytes is set below the message) goes out as headers only. The learner never stops."""
    big = b'{"id": "big", "text": "' + b"w" * 30_000 + b'"}'
    huge = b'{"id": "huge", "text": "' + b"w" * 60_000 + b'"}'
    s = settings.model_copy(
        update={
            "max_article_bytes": 4096,
            "dlq_max_bytes": 40_000,
            "kafka_config": {"message.max.bytes": "50000"},
        }
    )
    ok = b'{"id": "ok", "text": "markets rally as the bank cuts rates"}'
    produce_keyed(s, [(b"big", big), (b"huge", huge), (b"ok", ok)])
    learner = Learner(s)
    stop, thread, errors = _run(learner)
    outputs = read_all(s, s.output_topic, 1)
    dead = {m.key(): m for m in read_all(s, s.dlq_topic, 2)}
    stop.set()
    thread.join(60)
    assert not errors, errors
    assert [m.key() for m in outputs] == [b"ok"]
    assert set(dead) == {b"big", b"huge"}
    cut = dict(dead[b"big"].headers())
    assert dead[b"big"].value() == big  # under the dead-letter limit: the original bytes
    assert H_TRUNCATED not in cut and int(cut[H_ORIGINAL_BYTES]) == len(big)
    refused = dict(dead[b"huge"].headers())
    assert refused[H_REASON] == b"oversize" and refused[H_TRUNCATED] == b"true"
    assert int(refused[H_ORIGINAL_BYTES]) == len(huge)
    assert len(dead[b"huge"].value() or b"") < 50_000


def test_dead_letter_value_is_cut_to_the_limit_with_its_checksum(settings: Settings) -> None:
    import hashlib

    value = b'{"id": "long", "text": "' + b"w" * 20_000 + b'"}'
    s = settings.model_copy(update={"max_article_bytes": 4096, "dlq_max_bytes": 1000})
    produce_keyed(s, [(b"long", value)])
    learner = Learner(s)
    stop, thread, errors = _run(learner)
    (dead,) = read_all(s, s.dlq_topic, 1)
    stop.set()
    thread.join(60)
    assert not errors, errors
    headers = dict(dead.headers())
    assert dead.value() == value[:1000]
    assert headers[H_TRUNCATED] == b"true" and int(headers[H_ORIGINAL_BYTES]) == len(value)
    assert headers[H_ORIGINAL_SHA256].decode() == hashlib.sha256(value).hexdigest()
