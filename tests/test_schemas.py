"""Input validation: every way an article can be bad gets a reason; good ones pass untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.schemas import Article, Rejection, decode_article
from service.snapshot import SnapshotCorrupt, pack, unpack


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "invalid"),
        (b"x" * 200, "oversize"),
        (b"\xff\xfe", "not_utf8"),
        (b"{not json", "not_json"),
        (b'"a string"', "not_object"),
        (b'{"text": "x"}', "invalid"),
        (b'{"id": "", "text": "x"}', "invalid"),
        (b'{"id": "' + b"i" * 257 + b'", "text": "x"}', "invalid"),
        (b'{"id": 5, "text": "x"}', "invalid"),
        (b'{"id": "a"}', "invalid"),
        (b'{"id": "a", "text": ""}', "invalid"),
        (b'{"id": "a", "text": " \\n\\t ", "title": "  "}', "invalid"),  # white space alone: nothing to learn
        (b'{"id": "a", "text": "x", "published_at": "not a date"}', "invalid"),
    ],
)
def test_bad_input_is_rejected_with_a_reason(value: bytes | None, reason: str) -> None:
    result = decode_article(value, max_bytes=150 if value and len(value) == 200 else 10_000)
    assert isinstance(result, Rejection)
    assert result.reason == reason and result.detail


DEEP = 10_000


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"[" * DEEP + b"]" * DEEP, "not_json"),
        (b'{"a":' * DEEP + b"1" + b"}" * DEEP, "not_json"),
        (b'{"id": "a", "text": "x", "unknown": ' + b"[" * DEEP + b"]" * DEEP + b"}", "not_json"),
        (b'{"id": "a", "text": "lone \\ud800 surrogate"}', "not_json"),  # no encoder could write it back out
        (b'{"id": "a", "text": "raw\x00nul"}', "not_json"),  # control characters must be escaped in JSON
        (b'{"id": "a", "text": NaN}', "invalid"),
    ],
)
def test_hostile_json_is_rejected_not_raised(value: bytes, reason: str) -> None:
    """10,000-deep JSON once raised RecursionError out of the decoder and crashed the learner on every restart."""
    result = decode_article(value, max_bytes=10**6)
    assert isinstance(result, Rejection), result
    assert result.reason == reason and result.detail


def test_byte_order_mark_duplicate_keys_and_escaped_controls_are_accepted() -> None:
    bom = decode_article(b'\xef\xbb\xbf{"id": "a", "text": "x"}', 10_000)
    assert isinstance(bom, Article) and bom.id == "a"
    dup = decode_article(b'{"id": "a", "id": "b", "text": "x"}', 10_000)
    assert isinstance(dup, Article) and dup.id == "b"  # the last one wins, as in every JSON library
    escaped = decode_article(b'{"id": "a", "text": "tab\\there \\u0000 \\u202e rtl"}', 10_000)
    assert isinstance(escaped, Article) and "\x00" in escaped.text and "\u202e" in escaped.text


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("2024-01-01T10:00:00", "2024-01-01T10:00:00+00:00"),  # no zone: UTC
        ("2024-01-01", "2024-01-01T00:00:00+00:00"),
        ("2024-01-01T10:00:00+02:00", "2024-01-01T10:00:00+02:00"),  # a zone is kept
        ("2024-01-01T08:00:00Z", "2024-01-01T08:00:00+00:00"),
        ("2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999999+00:00"),  # a leap second: RFC 3339 allows it
        ("2016-12-31T23:59:60.25-05:00", "2016-12-31T23:59:59.999999-05:00"),
        ("Mon, 01 Jan 2024 10:00:00 GMT", "2024-01-01T10:00:00+00:00"),  # RFC 2822, as RSS writes dates
        ("Mon, 01 Jan 2024 10:00:00 +0200", "2024-01-01T10:00:00+02:00"),
        ("1 Jan 2024 10:00:00 GMT", "2024-01-01T10:00:00+00:00"),  # RFC 2822 leaves the weekday out at will
        (" 2024-01-01T08:00:00Z\n", "2024-01-01T08:00:00+00:00"),  # white space around it
        (1_700_000_000, "2023-11-14T22:13:20+00:00"),  # a JSON number: Unix seconds
        (1_700_000_000_000, "2023-11-14T22:13:20+00:00"),  # ... or milliseconds
    ],
)
def test_published_at_always_has_a_zone_so_outputs_copy_an_rfc_3339_time(given: str | int, read: str) -> None:
    a = decode_article(json.dumps({"id": "a", "text": "x", "published_at": given}).encode(), 10_000)
    assert isinstance(a, Article) and a.published_at is not None and a.published_at.isoformat() == read


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_published_at_is_no_time(given: str) -> None:
    a = decode_article(json.dumps({"id": "a", "text": "x", "published_at": given}).encode(), 10_000)
    assert isinstance(a, Article) and a.published_at is None


@pytest.mark.parametrize("given", ["Mon, 99 Foo 2024", "2024-01-01T10Z", "yesterday", "2016-12-31T23:59:61Z"])
def test_a_published_at_that_is_no_time_is_refused_with_the_field_named(given: str) -> None:
    r = decode_article(json.dumps({"id": "a", "text": "x", "published_at": given}).encode(), 10_000)
    assert isinstance(r, Rejection) and r.reason == "invalid" and r.detail.startswith("published_at:")


def test_good_article_keeps_its_fields_and_ignores_unknown_ones() -> None:
    raw = {
        "id": "a1",
        "title": "Rates",
        "text": "The bank cut rates.",
        "published_at": "2026-11-22T10:00:00Z",
        "label": "economy",
        "extra": {"nested": True},
    }
    a = decode_article(json.dumps(raw).encode(), 10_000)
    assert isinstance(a, Article)
    assert a.id == "a1" and a.label == "economy" and a.published_at is not None
    assert a.content() == "Rates\nThe bank cut rates."
    title_only = decode_article(b'{"id": "b", "text": "", "title": "Headline"}', 10_000)
    assert isinstance(title_only, Article)


def test_snapshot_payload_round_trip_without_pickle() -> None:
    payload = {
        "kernel": {"state": {"m": np.arange(6.0).reshape(2, 3), "rng": {"s": [1, 2]}}},
        "offsets": [["t", 0, 5]],
        "words": ["a", None],
        "scalar": np.array(5, dtype=np.int32),
        "strided": np.arange(12.0).reshape(3, 4)[:, ::2],
        "empty": np.zeros((0, 3), dtype=np.float32),
        "flags": np.array([True, False]),
    }
    out = unpack(pack(payload))
    np.testing.assert_array_equal(out["kernel"]["state"]["m"], payload["kernel"]["state"]["m"])
    assert out["kernel"]["state"]["rng"] == {"s": [1, 2]} and out["offsets"] == [["t", 0, 5]]
    assert out["words"] == ["a", None]
    for key in ("scalar", "strided", "empty", "flags"):
        assert out[key].dtype == payload[key].dtype and out[key].shape == payload[key].shape
        np.testing.assert_array_equal(out[key], payload[key])
    truncated = bytes(pack(payload))[:-8]
    with pytest.raises(SnapshotCorrupt):
        unpack(truncated)
    with pytest.raises(SnapshotCorrupt):
        unpack(b"garbage")


def test_drift_is_the_hellinger_distance_of_each_topic() -> None:
    from kernels.summaries import hellinger_rows

    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(40), 19), rng.dirichlet(np.ones(40), 19)
    direct = np.sqrt(0.5 * ((np.sqrt(p) - np.sqrt(q)) ** 2).sum(axis=1))
    np.testing.assert_allclose(hellinger_rows(p, q), direct, rtol=1e-12)
    np.testing.assert_allclose(hellinger_rows(p, q.astype(np.float32)), direct, rtol=1e-5)  # the writer's kept φ
    np.testing.assert_allclose(hellinger_rows(p, p), 0.0, atol=1e-12)
    disjoint = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    np.testing.assert_allclose(hellinger_rows(*disjoint), 1.0)
    with pytest.raises(ValueError, match="same shape"):
        hellinger_rows(p, q[:3])


def test_topic_labels_are_each_topics_top_words_in_order() -> None:
    from service.pipeline import TopicLabels

    rng = np.random.default_rng(0)
    phi = rng.dirichlet(np.ones(300), 11)
    phi[2, [5, 9, 200]] = 0.5  # ties: the lower word id first, as a stable sort puts them
    words = [f"w{i}" for i in range(300)]
    labels = TopicLabels(phi, words, n_words=6)
    expected = np.argsort(-phi, axis=1, kind="stable")[:, :6]
    np.testing.assert_array_equal(labels.top_ids, expected)
    assert labels.labels[3] == " ".join(words[i] for i in expected[3, :3])
    assert TopicLabels(phi[:, :4], words[:4]).top_ids.shape == (11, 4)  # fewer words than asked for
