"""The bounded summary history in a real Redis: what one record keeps, and that thinning bounds it for ever."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
import redis

from service.history import TOP_WORDS, SummaryHistory, compact, victims
from tests.conftest import Endpoints

pytestmark = pytest.mark.integration


def summary(version: int, k: int = 4, articles: int | None = None) -> dict[str, Any]:
    """A summary shaped like the learner's ``P:summary``."""
    weights = [(version + i) % 7 + 1 for i in range(k)]
    return {
        "version": version,
        "algorithm": "scvb0",
        "created_at": 1_700_000_000.0 + 30 * version,
        "articles_learned": 500 * version if articles is None else articles,
        "topics_used": k,
        "model_drift": 0.01,
        "topics": [
            {
                "topic": i,
                "prevalence": weights[i] / sum(weights),
                "drift": 0.02,
                "top_words": [f"w{i}_{j}_{version % 3}" for j in range(15)],
            }
            for i in range(k)
        ],
    }


@pytest.fixture
def client(endpoints: Endpoints) -> redis.Redis:
    return redis.Redis.from_url(endpoints.redis_url)


@pytest.fixture
def prefix() -> str:
    return f"test-history-{uuid.uuid4().hex[:8]}"


def test_a_record_keeps_version_time_articles_and_each_topic(client: redis.Redis, prefix: str) -> None:
    h = SummaryHistory(client, prefix, max_points=10)
    assert h.read() == []
    s = summary(3)
    assert h.append(s) == []
    (record,) = h.read()
    assert record["version"] == 3 and record["articles_learned"] == 1500 and record["algorithm"] == "scvb0"
    assert record["created_at"] == s["created_at"]
    assert [t["topic"] for t in record["topics"]] == [0, 1, 2, 3]
    for kept, full in zip(record["topics"], s["topics"], strict=True):
        assert kept["prevalence"] == pytest.approx(full["prevalence"], abs=1e-6)
        assert kept["top_words"] == full["top_words"][:TOP_WORDS]
        assert "drift" not in kept  # per-snapshot drift is not kept: it depends on the spacing of snapshots
    # A summary with a version already kept replaces it.
    again = summary(3, articles=1600)
    h.append(again)
    assert [r["articles_learned"] for r in h.read()] == [1600]


def test_history_is_bounded_dense_recently_and_keeps_the_oldest(client: redis.Redis, prefix: str) -> None:
    h = SummaryHistory(client, prefix, max_points=24)
    dropped_total = 0
    for v in range(1, 401):
        dropped_total += len(h.append(summary(v, k=2)))
        assert client.zcard(h.versions_key) <= 24 and client.hlen(h.records_key) <= 24
    kept = h.versions()
    assert len(kept) == 24 and dropped_total == 400 - 24
    assert kept[0] == 1 and kept[-1] == 400
    assert sorted(int(v) for v in client.hkeys(h.records_key)) == kept  # records and index agree
    assert [r["version"] for r in h.read()] == kept
    # Spacing grows into the past: the newest records are consecutive, the oldest gaps are the widest.
    gaps = [b - a for a, b in itertools.pairwise(kept)]
    assert gaps[-3:] == [1, 1, 1]
    assert max(gaps[:3]) >= 10 * max(gaps[-6:])
    # and each gap is at most proportional to the age of the record before it (geometric spacing).
    ages = [400 - v for v in kept[1:-1]]
    assert all(g <= a for g, a in zip(gaps[1:], ages, strict=False))


def test_a_smaller_max_points_thins_at_once(client: redis.Redis, prefix: str) -> None:
    big = SummaryHistory(client, prefix, max_points=50)
    for v in range(1, 41):
        big.append(summary(v, k=1))
    small = SummaryHistory(client, prefix, max_points=10)
    dropped = small.append(summary(41, k=1))
    assert len(dropped) == 31 and len(small.read()) == 10 and small.versions()[0] == 1


def test_bad_summaries_are_refused_with_a_clear_error_and_store_nothing(client: redis.Redis, prefix: str) -> None:
    h = SummaryHistory(client, prefix)
    h.append(summary(1))
    for bad, says in (
        ({"version": 2, "topics": []}, "articles_learned"),
        ({"version": 2, "articles_learned": 1, "topics": "x"}, "must be a list"),
        ({"version": 2, "articles_learned": 1, "topics": [{"topic": 0}]}, "topic, prevalence and top_words"),
        (
            {"version": 2, "articles_learned": 1, "topics": [{"topic": 0, "prevalence": "nan", "top_words": []}]},
            "finite",
        ),
    ):
        with pytest.raises(ValueError, match=says):
            h.append(bad)
    assert h.versions() == [1]
    with pytest.raises(ValueError, match="max_points"):
        SummaryHistory(client, prefix, max_points=2)


def test_an_undecodable_record_is_left_out_of_read_but_not_deleted(client: redis.Redis, prefix: str) -> None:
    h = SummaryHistory(client, prefix)
    for v in (1, 2, 3):
        h.append(summary(v))
    client.hset(h.records_key, "2", b"\xff not json")
    assert [r["version"] for r in h.read()] == [1, 3]
    assert client.hget(h.records_key, "2") == b"\xff not json"


def test_a_member_that_is_no_version_is_passed_over_and_cleared_by_the_writer(
    client: redis.Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Something else wrote into ``P:history:versions``. Before, every later append (the learner logged "summary
    not written" at each snapshot) and every ``topicstream report`` failed on it."""
    h = SummaryHistory(client, prefix, max_points=3)
    h.append(summary(1))
    # "01" and "2 ": int() reads them as 1 and 2, and two 1s made the thinning divide by zero
    client.zadd(h.versions_key, {b"junk": 1e9, b"\xff": 5, b"01": 1, b"2 ": 2})
    assert h.versions() == [1] and [r["version"] for r in h.read()] == [1]
    assert "no version" in caplog.text
    for v in (2, 3, 4):
        h.append(summary(v))
    assert h.versions() == [1, 3, 4] and client.zcard(h.versions_key) == 3  # thinned, and the junk gone


def test_victims_rule() -> None:
    assert victims([1, 2, 3], 3) == []
    # Evenly spaced: the score is 2 / age, so the oldest interior record goes first.
    assert victims([1, 2, 3, 4, 5], 4) == [2]
    # An over-dense stretch in the past is thinned before the recent one.
    assert victims([1, 50, 51, 52, 99, 100], 5) == [51]
    dropped = victims(list(range(1, 101)), 3)
    assert len(dropped) == 97 and len(set(dropped)) == 97
    assert sorted(set(range(1, 101)) - set(dropped))[0] == 1 and 100 not in dropped


def test_compact_record_is_json_and_small() -> None:
    s = summary(7, k=100)
    record = compact(s)
    assert len(json.dumps(record)) < 0.75 * len(json.dumps(s))
