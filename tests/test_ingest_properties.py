"""Property tests of the ingest path: raw Kafka message → article or dead letter → words → vocabulary slots.

The service's rule is that a hostile message never stops the stream, and that bad input gets a clear reason and
loses nothing: every input comes out either as an article or as a dead letter. ``tests/test_schemas.py`` and
``tests/test_text.py`` pin that rule on hand-picked examples; here hypothesis searches for the input that breaks
it, on the pure functions alone (no broker, no Redis, nothing mocked):

* :func:`service.schemas.decode_article` (bytes → :class:`Article` | :class:`Rejection`), checked against an
  independent reading of the input contract in ``../shared/notes/architecture.md``;
* :func:`service.pipeline.decode_batch` and :func:`service.pipeline.dead_letter_record` (real
  ``confluent_kafka.Message`` objects, built in memory);
* :func:`service.source._key_of`, the producer's message key (the article id a dead letter is found by);
* :class:`service.text.Tokenizer` and :class:`service.text.Vocabulary`.

Three defects this file found are fixed; the tests that found them say which (``Found here:``).
"""

from __future__ import annotations

import hashlib
import json
import operator
import unicodedata
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Message
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from service.pipeline import (
    H_DETAIL,
    H_HEADERS_DROPPED,
    H_ORIGINAL_BYTES,
    H_ORIGINAL_KEY_SHA256,
    H_ORIGINAL_SHA256,
    H_REASON,
    H_SRC_OFFSET,
    H_SRC_PARTITION,
    H_SRC_TOPIC,
    H_TRUNCATED,
    MAX_DLQ_KEY_BYTES,
    MAX_DLQ_ORIGINAL_HEADER_BYTES,
    dead_letter_record,
    decode_batch,
)
from service.schemas import BOM, Article, Rejection, decode_article
from service.source import _key_of
from service.text import FlatBags, Tokenizer, Vocabulary

REASONS = {"not_utf8", "not_json", "not_object", "invalid", "oversize"}
OPTIONAL_STRINGS = ("title", "source", "url", "language", "label")
FIELDS = ("id", "text", *OPTIONAL_STRINGS, "published_at")

# No example database and derandomized: every run (CI's too) tries the same examples, so a failure seen anywhere
# is reproduced by running the test again; the file's examples were searched widely while it was written.
_COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow],
}
FAST = settings(max_examples=150, **_COMMON)
SLOW = settings(max_examples=40, **_COMMON)

# ---------------------------------------------------------------------------------------------- strategies

#: Any code point, lone UTF-16 surrogates and NUL included (hypothesis leaves surrogates out by default).
ANY_CHAR = st.characters(exclude_categories=())
#: Characters that broke parsers before: NUL, surrogate halves, BOM, right-to-left override, quote, backslash.
NASTY_CHAR = st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ude00", "\ufeff", "\u202e", '"', "\\", "İ"])
HOSTILE_TEXT = st.text(ANY_CHAR | NASTY_CHAR, max_size=30) | st.builds(
    operator.mul, st.sampled_from(["a", "é", "\ud800", "word ", "\x00"]), st.integers(0, 20_000)
)
#: Text a JSON encoder can write as UTF-8 (what a valid article holds).
CLEAN_TEXT = st.text(max_size=60)
BIG_INT = st.builds(lambda digits, sign: sign * 10**digits, st.integers(0, 4000), st.sampled_from([1, -1]))
JSON_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers()
    | BIG_INT
    | st.floats(allow_nan=True, allow_infinity=True)  # json.dumps writes NaN / Infinity literals
    | HOSTILE_TEXT
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(HOSTILE_TEXT, kids, max_size=3),
    max_leaves=8,
)

#: RFC 3339 offsets: whole minutes, less than a day.
OFFSETS = st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
AWARE_DATETIMES = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=OFFSETS)
RFC3339 = AWARE_DATETIMES.map(datetime.isoformat) | AWARE_DATETIMES.map(
    lambda d: d.astimezone(timezone.utc).replace(tzinfo=None).isoformat() + "Z"
)
#: published_at values the contract rejects (numbers are left out: pydantic's lax mode reads them as Unix time).
NOT_A_TIMESTAMP = st.sampled_from(["not a date", "yesterday", "2026-13-45T99:99:99Z", "NaN"]) | st.booleans()
#: published_at values that mean "no time": an empty or blank string, as feeds write a missing date.
NO_TIME = st.sampled_from(["", " ", "\t"])

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "id": st.text(min_size=1, max_size=256) | JSON_VALUE,
    "text": CLEAN_TEXT | JSON_VALUE,
    **{f: st.none() | CLEAN_TEXT | JSON_VALUE for f in OPTIONAL_STRINGS},
    "published_at": st.none() | RFC3339 | NO_TIME | NOT_A_TIMESTAMP | st.lists(st.integers(), max_size=2),
}
EXTRA_FIELDS = st.dictionaries(HOSTILE_TEXT.filter(lambda k: k not in FIELDS), JSON_VALUE, max_size=3)


@st.composite
def article_like(draw: st.DrawFn) -> dict[str, Any]:
    """An object with some of the article's fields (each a good value or any JSON value) and extra fields."""
    obj: dict[str, Any] = draw(EXTRA_FIELDS)
    for field in FIELDS:
        if draw(st.integers(0, 9)) < (9 if field in ("id", "text") else 4):
            obj[field] = draw(FIELD_VALUES[field])
    return obj


def _nest(depth: int, kind: str) -> bytes:
    return b"[" * depth + b"]" * depth if kind == "list" else b'{"a":' * depth + b"1" + b"}" * depth


#: Raw JSON pieces no Python value serializes to: non-UTF-8, raw NUL, escaped lone surrogates, huge numbers, depth.
FRAGMENT = (
    st.sampled_from(
        [
            b"NaN",
            b"-Infinity",
            b"1e400",
            b"-1e-400",
            b"1" * 5000,
            b'"\\ud800"',
            b'"\\udc00\\ud800"',
            b'"\\ud83d\\ude00"',
            b'"a\x00b"',
            b'"\xff\xfe"',
            b'"\xc0\x80"',
            b'"\xed\xa0\x80"',
            b'"\\\\\\"',
            b"tru",
            b"",
        ]
    )
    | st.builds(_nest, st.integers(1, 3000), st.sampled_from(["list", "dict"]))
    | JSON_VALUE.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=8)
)
RAW_MESSAGE = (
    st.builds(
        lambda i, t, x, bom: (BOM if bom else b"") + b'{"id": ' + i + b', "text": ' + t + b', "extra": ' + x + b"}",
        FRAGMENT,
        FRAGMENT,
        FRAGMENT,
        st.booleans(),
    )
    | FRAGMENT
    | st.binary(max_size=200)
    | article_like().map(lambda o: json.dumps(o).encode())
)


@st.composite
def valid_articles(draw: st.DrawFn) -> Article:
    text = draw(CLEAN_TEXT)
    title = draw(st.text(min_size=1, max_size=60) if not text else st.none() | CLEAN_TEXT)
    optional = {f: draw(st.none() | CLEAN_TEXT) for f in ("source", "url", "language", "label")}
    when = draw(st.none() | AWARE_DATETIMES | st.datetimes(min_value=datetime(1, 1, 2)))
    return Article(id=draw(st.text(min_size=1, max_size=256)), text=text, title=title, published_at=when, **optional)


# ---------------------------------------------------------------------------------------------- the oracle


def _parsed(s: str) -> str:
    """What a JSON parser reads back from ``json.dumps(s)``: an escaped surrogate pair is one code point."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def _has_lone_surrogate(s: str) -> bool:
    try:
        _parsed(s)
    except UnicodeDecodeError:
        return True
    return False


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)


def _time_given(obj: dict[str, Any]) -> bool:
    """Whether ``published_at`` holds something other than "no time" (absent, null, an empty or blank string)."""
    value = obj.get("published_at")
    return value is not None and not (isinstance(value, str) and not value.strip())


def _is_rfc3339(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None and "T" in value
    except ValueError:
        return False


def _field_errors(obj: dict[str, Any]) -> set[str]:
    """The fields the contract says are wrong (``"article"``: text and title both empty)."""
    errors: set[str] = set()
    id_ = obj.get("id")
    if not (isinstance(id_, str) and 1 <= len(_parsed(id_)) <= 256):
        errors.add("id")
    if not isinstance(obj.get("text"), str):
        errors.add("text")
    errors.update(f for f in OPTIONAL_STRINGS if obj.get(f) is not None and not isinstance(obj[f], str))
    if _time_given(obj) and not _is_rfc3339(obj["published_at"]):
        errors.add("published_at")
    if not errors and not obj["text"] and not obj.get("title"):
        errors.add("article")
    return errors


def _expected_reason(obj: Any, ascii_only: bool) -> str | None:
    """The rejection reason the contract gives ``json.dumps(obj)`` (UTF-8), or None for a valid article."""
    strings = list(_strings(obj))
    if ascii_only and any(map(_has_lone_surrogate, strings)):
        return "not_json"  # written as a \ud800 escape: no encoder could write it back out
    if not ascii_only and any(any(0xD800 <= ord(c) <= 0xDFFF for c in s) for s in strings):
        return "not_utf8"  # written raw: UTF-8 has no surrogates
    if not isinstance(obj, dict):
        return "not_object"
    return "invalid" if _field_errors(obj) else None


def _names(detail: str, field: str) -> bool:
    return detail.startswith(f"{field}: ") or f"; {field}: " in detail


def _check_rejection(result: Article | Rejection) -> None:
    if isinstance(result, Rejection):
        assert result.reason in REASONS, result
        assert result.detail.strip() and result.detail.isprintable(), result  # one readable line


# ---------------------------------------------------------------------------------------------- decoding


@FAST
@given(value=st.none() | RAW_MESSAGE, slack=st.integers(-50, 50))
def test_any_message_value_is_an_article_or_a_readable_reason(value: bytes | None, slack: int) -> None:
    max_bytes = max(0, (len(value) if value else 0) + slack)
    result = decode_article(value, max_bytes)
    assert isinstance(result, Article | Rejection)
    _check_rejection(result)
    if value is not None and len(value) > max_bytes:
        assert isinstance(result, Rejection) and result.reason == "oversize"
    if isinstance(result, Article):
        # whatever was accepted can be written out again (outputs are orjson, which refuses surrogates)
        assert orjson.loads(orjson.dumps(result.model_dump(mode="json")))["id"] == result.id


@FAST
@given(obj=article_like() | JSON_VALUE, ascii_only=st.booleans(), bom=st.booleans())
def test_any_json_value_is_an_article_exactly_when_the_contract_says_so(obj: Any, ascii_only: bool, bom: bool) -> None:
    raw = (BOM if bom else b"") + json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    result = decode_article(raw, max_bytes=len(raw))
    expected = _expected_reason(obj, ascii_only)
    if expected is None:
        assert isinstance(result, Article), result
        assert result.id == obj["id"] and result.text == obj["text"]
        assert all(getattr(result, f) == obj.get(f) for f in OPTIONAL_STRINGS)
        assert (result.published_at is None) == (not _time_given(obj))
    else:
        assert isinstance(result, Rejection), (expected, result)
        assert result.reason == expected, result
        _check_rejection(result)
        if expected == "invalid":  # the detail names every wrong field
            missing = {f for f in _field_errors(obj) if not _names(result.detail, f)}
            assert not missing, (missing, result.detail)


@FAST
@given(article=valid_articles(), ascii_only=st.booleans())
def test_a_valid_article_round_trips(article: Article, ascii_only: bool) -> None:
    for raw in (
        article.model_dump_json().encode(),
        json.dumps(article.model_dump(mode="json"), ensure_ascii=ascii_only).encode(),
    ):
        again = decode_article(raw, max_bytes=len(raw))
        assert isinstance(again, Article), again
        assert again.model_dump(exclude={"published_at"}) == article.model_dump(exclude={"published_at"})
        assert again.content() == article.content()
        before, after = article.published_at, again.published_at
        if before is None or after is None:
            assert before is after is None
        else:  # the same wall time and offset (no comparison in UTC: year 1 minus an offset overflows)
            assert after.replace(tzinfo=None) == before.replace(tzinfo=None)
            assert after.utcoffset() == before.utcoffset()


# ---------------------------------------------------------------------------------------------- dead letters


def _offset(msg: Message) -> int:
    offset = msg.offset()
    assert offset is not None
    return offset


HEADERS = st.lists(
    st.tuples(
        # names like ours too: a forged reason or cut, or a dead letter replayed into the input
        st.text(max_size=10) | st.sampled_from([H_REASON, H_TRUNCATED, H_SRC_OFFSET]),
        st.none() | st.binary(max_size=20) | st.builds(bytes, st.integers(0, 9000)),
    ),
    max_size=3,
)


@FAST
@given(values=st.lists(st.none() | RAW_MESSAGE, max_size=6), dlq_max_bytes=st.integers(0, 300), headers=HEADERS)
def test_a_batch_loses_nothing_and_every_dead_letter_says_where_and_why(
    values: list[bytes | None], dlq_max_bytes: int, headers: list[tuple[str, bytes | None]]
) -> None:
    original_headers: list[tuple[str, str | bytes | None]] = list(headers)
    msgs = [
        Message(topic="articles", partition=2, offset=i, key=b"k%d" % i, value=v, headers=original_headers or None)
        for i, v in enumerate(values)
    ]
    decoded = decode_batch(msgs, max_bytes=1000)
    good = [_offset(m) for m, _ in decoded.good]
    bad = [_offset(m) for m, _ in decoded.bad]
    # every message comes out exactly once, as what decode_article makes of it, in input order on each side
    assert sorted(good + bad) == list(range(len(values))) and good == sorted(good) and bad == sorted(bad)
    assert all(decode_article(values[_offset(m)], 1000) == article for m, article in decoded.good)
    for msg, rejection in decoded.bad:
        assert rejection == decode_article(values[_offset(msg)], 1000)
        _check_rejection(rejection)
        key, value, out = dead_letter_record(msg, rejection, dlq_max_bytes)
        got = dict(out)
        assert key == msg.key() and H_ORIGINAL_KEY_SHA256 not in got
        assert got[H_REASON] == rejection.reason.encode()
        assert got[H_DETAIL] == rejection.detail[:2000].encode()
        assert (got[H_SRC_TOPIC], got[H_SRC_PARTITION], got[H_SRC_OFFSET]) == (
            b"articles",
            b"2",
            str(msg.offset()).encode(),
        )
        original = msg.value() or b""
        assert got[H_ORIGINAL_BYTES] == str(len(original)).encode()
        assert value == original[:dlq_max_bytes]
        if len(original) > dlq_max_bytes:
            assert got[H_TRUNCATED] == b"true"
            assert got[H_ORIGINAL_SHA256] == hashlib.sha256(original).hexdigest().encode()
        else:
            assert H_TRUNCATED not in got
        ours = [k for k, _ in out if k.startswith("topicstream-")]
        assert len(ours) == len(set(ours))  # every topicstream-* header is this service's, once
        kept = [h for h in out if not h[0].startswith("topicstream-")]
        if sum(len(k) + len(v or b"") for k, v in headers) > MAX_DLQ_ORIGINAL_HEADER_BYTES:
            assert not kept and got[H_HEADERS_DROPPED] == str(len(headers)).encode()
        else:  # the original headers, those named like ours renamed
            assert kept == [(f"original-{k}" if k.startswith("topicstream-") else k, v) for k, v in headers]


class _UnreadableHeaders(Message):
    """A consumed message with a header key that is not UTF-8, as confluent-kafka hands it over: ``headers()``
    raises (a message built in Python keeps its keys as given, so the C client's failure is reproduced here; the
    real one takes a producer that sends raw header bytes, e.g. kafka-python)."""

    def headers(self) -> Any:
        try:
            b"\xff".decode()
        except UnicodeDecodeError as e:
            raise SystemError(
                "<method 'headers' of 'cimpl.Message' objects> returned a result with an exception set"
            ) from e


def test_a_message_whose_headers_cannot_be_read_is_dead_lettered_without_them() -> None:
    """Kafka header keys are bytes on the wire; one that is not UTF-8 made reading the headers raise, and the learner
    crashed on its dead letter at every restart (a crash loop: no later message answered)."""
    msg = _UnreadableHeaders(topic="articles", partition=0, offset=7, value=b"not json")
    ((_, rejection),) = decode_batch([msg], max_bytes=1000).bad
    _, value, out = dead_letter_record(msg, rejection, 1000)
    got = dict(out)
    assert value == b"not json" and got[H_REASON] == b"not_json" and got[H_HEADERS_DROPPED] == b"unreadable"
    assert all(k.startswith("topicstream-") for k, _ in out)


def test_a_dead_letters_key_is_bounded_too() -> None:
    """The value and the headers were bounded, the key was not: a 700,000-byte key beside a value near
    TOPICSTREAM_DLQ_MAX_BYTES made a dead letter larger than a dead-letter topic may take, and a refusal stops the
    learner at every restart (a review's finding). A key over MAX_DLQ_KEY_BYTES is left out, its hash kept."""
    long_key = b"k" * (MAX_DLQ_KEY_BYTES + 1)
    msg = Message(topic="articles", partition=0, offset=3, key=long_key, value=b"not json")
    ((_, rejection),) = decode_batch([msg], max_bytes=1000).bad
    key, value, out = dead_letter_record(msg, rejection, 1000)
    assert key is None and value == b"not json"
    assert dict(out)[H_ORIGINAL_KEY_SHA256] == hashlib.sha256(long_key).hexdigest().encode()
    short = Message(topic="articles", partition=0, offset=4, key=long_key[:MAX_DLQ_KEY_BYTES], value=b"not json")
    assert dead_letter_record(short, rejection, 1000)[0] == long_key[:MAX_DLQ_KEY_BYTES]


# ---------------------------------------------------------------------------------------------- the producer's key


# Found here: `service.source._key_of` raised on hostile lines, and `produce_lines` (which catches only
# BufferError and KafkaException) stopped: RecursionError from json.loads on deep nesting (b"[" * 10_000, which
# the learner itself dead-letters as not_json) and UnicodeEncodeError from `.encode()` of an id holding a lone
# surrogate escape (b'{"id": "\\ud800"}'). It now parses as the learner does.
@FAST
@example(line=b"[" * 10_000 + b"]" * 10_000)  # the minimal case hypothesis finds is 1,990 deep
@given(line=RAW_MESSAGE)
def test_the_producer_key_of_any_line_is_bytes_or_none(line: bytes) -> None:
    key = _key_of(line)
    assert key is None or isinstance(key, bytes)


# Found here: the same, for an id that is any string: `obj["id"].encode()` raised UnicodeEncodeError on a lone
# surrogate (json.loads accepts the escape "\ud800"; the learner rejects it).
@FAST
@example(id_="\ud800", ascii_only=True)  # json.dumps writes '{"id": "\\ud800", ...}'
@given(id_=HOSTILE_TEXT, ascii_only=st.booleans())
def test_the_producer_key_of_an_object_with_any_id_is_bytes_or_none(id_: str, ascii_only: bool) -> None:
    line = json.dumps({"id": id_, "text": "x"}, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    key = _key_of(line)
    assert key is None or key == _parsed(id_).encode()


@FAST
@given(obj=article_like(), bom=st.booleans())
def test_the_producer_key_is_the_id_the_learner_reads(obj: dict[str, Any], bom: bool) -> None:
    """Outputs are keyed by the article id and dead letters by the message key: both must name the same article,
    and a rejected object whose id could be read keeps it in its dead letter's key."""
    raw = (BOM if bom else b"") + json.dumps(obj).encode()
    result = decode_article(raw, max_bytes=len(raw))
    if isinstance(result, Article):
        assert _key_of(raw) == result.id.encode()
    elif result.reason == "invalid" and isinstance(obj.get("id"), str):
        assert _key_of(raw) == _parsed(obj["id"]).encode()


# ---------------------------------------------------------------------------------------------- the tokenizer

#: Made once, outside any test: the first Tokenizer() imports scikit-learn's stop words.
DEFAULT_STOP_WORDS = Tokenizer().stop_words
TOKENIZERS = st.builds(
    lambda stop, lo, span: Tokenizer(stop_words=stop, min_length=lo, max_length=lo + span),
    st.just(DEFAULT_STOP_WORDS) | st.lists(st.text("abcdeé", min_size=1, max_size=4), max_size=5),
    st.integers(1, 4),
    st.integers(0, 30),
)
ANY_TEXT = st.text(ANY_CHAR | NASTY_CHAR | st.sampled_from(" \n\t.'-_0123456789"), max_size=200)


@FAST
@given(tok=TOKENIZERS, text=ANY_TEXT)
def test_tokenizing_any_text_never_raises_is_deterministic_and_keeps_only_words(tok: Tokenizer, text: str) -> None:
    words = tok(text)
    assert words == tok(text) == Tokenizer(tok.stop_words, tok.min_length, tok.max_length)(text)
    assert tok.count(text) == Counter(words)
    for w in words:
        assert tok.min_length <= len(w) <= tok.max_length and w not in tok.stop_words
        assert w == w.lower() and not any(c.isspace() or c.isdecimal() or c == "_" for c in w), w


@SLOW
@given(texts=st.lists(st.text(max_size=120), max_size=5))
def test_the_batch_tokenizer_gives_every_article_text_the_same_bag(texts: list[str]) -> None:
    """count_many (polars, the learner's path) on any text a decoded article can hold (no surrogates) gives the
    bag of :meth:`Tokenizer.count`, except for the symbols its docstring names (circled letters: category So)
    and for code points this Python's Unicode database does not know yet (Cn): the Rust regex's newer tables
    take e.g. U+31350 (CJK Extension H, Unicode 15) for a letter, Python 3.11 (Unicode 14) does not."""
    tok = Tokenizer(DEFAULT_STOP_WORDS)
    flat = tok.count_many(texts)
    assert flat.n_docs == len(texts)
    assert np.all(np.diff(flat.doc) >= 0) and np.all(flat.counts >= 1)
    for d, text in enumerate(texts):
        if any(unicodedata.category(c) in ("So", "Cn") for c in text):
            continue
        rows = np.flatnonzero(flat.doc == d)
        assert list(zip(flat.words_at(rows), flat.counts[rows].tolist(), strict=True)) == list(tok.count(text).items())


#: Made once: a tokenizer with two languages' lists besides the English one.
LANGUAGE_TOKENIZER = Tokenizer(languages=["de", "fr"])
#: Words of every list (German, French, English stop words, and others), in any case.
MIXED_WORDS = st.sampled_from(["der", "und", "war", "will", "the", "les", "pour", "über", "krieg", "vote", "DIE"])


@SLOW
@given(
    docs=st.lists(
        st.tuples(
            st.lists(MIXED_WORDS | st.text("abcüé", min_size=1, max_size=5), max_size=12).map(" ".join),
            st.sampled_from([None, "", "de", "DE-at", "fr_CA", "en", "es", "xx-yy"]),
        ),
        max_size=6,
    )
)
def test_the_batch_tokenizer_gives_each_article_its_languages_bag(docs: list[tuple[str, str | None]]) -> None:
    """With languages, count_many (a join on language and word, the learner's path) gives each text the bag of
    :meth:`Tokenizer.count` in its language, in the same order."""
    texts, languages = [text for text, _ in docs], [language for _, language in docs]
    flat = LANGUAGE_TOKENIZER.count_many(texts, languages)
    assert flat.n_docs == len(texts) and np.all(np.diff(flat.doc) >= 0)
    for d, (text, language) in enumerate(docs):
        rows = np.flatnonzero(flat.doc == d)
        expected = list(LANGUAGE_TOKENIZER.count(text, language).items())
        assert list(zip(flat.words_at(rows), flat.counts[rows].tolist(), strict=True)) == expected


# ---------------------------------------------------------------------------------------------- the vocabulary

WORDS = st.text("abcde", min_size=1, max_size=2) | st.text(ANY_CHAR | NASTY_CHAR, min_size=1, max_size=4)
BAGS = st.lists(st.dictionaries(WORDS, st.integers(1, 5), max_size=5).map(Counter), max_size=4)
#: Vocabulary settings (keyword arguments), small enough that a few batches fill and churn it.
VOCAB_SETTINGS = st.fixed_dictionaries(
    {
        "capacity": st.integers(1, 8),
        "admit_count": st.sampled_from([0.5, 1.0, 2.0, 3.0]),
        "max_candidates": st.none() | st.integers(1, 12),
        "half_life_tokens": st.none() | st.floats(0.5, 200.0),
    }
)


@FAST
@given(params=VOCAB_SETTINGS, stream=st.lists(BAGS, min_size=1, max_size=8))
def test_the_vocabulary_never_exceeds_its_capacity_whatever_words_arrive(
    params: dict[str, Any], stream: list[list[Counter[str]]]
) -> None:
    vocab, twin = Vocabulary(**params), Vocabulary(**params)
    capacity = vocab.capacity
    for bags in stream:
        enc = vocab.encode(bags)
        twin.encode(bags)
        assert len(vocab) <= capacity and len(vocab.slot_words()) == capacity
        assert vocab.n_candidates <= vocab.max_candidates
        held = vocab.words()
        assert len(set(held)) == len(held) and all(vocab.word(vocab.id_of(w) or 0) == w for w in held)
        recycled = enc.recycled.tolist()
        assert len(set(recycled)) == len(recycled) and all(0 <= s < capacity for s in recycled)
        b = enc.batch
        assert len(b.indptr) == len(bags) + 1 and np.all((b.word_ids >= 0) & (b.word_ids < capacity))
        # no token disappears: each is encoded or counted out of vocabulary
        assert enc.oov_tokens + b.counts.sum() == sum(sum(bag.values()) for bag in bags)
    assert vocab.slot_words() == twin.slot_words()  # deterministic
    frozen = vocab.slot_words(), vocab.n_candidates, vocab._counts.copy()
    vocab.encode(stream[0], learn=False)
    assert (vocab.slot_words(), vocab.n_candidates) == frozen[:2] and np.array_equal(vocab._counts, frozen[2])


# Found here: `Vocabulary.encode` looks the batch's known words up *before* `_admit`, which may evict some of
# them for this batch's new words; the rows of an evicted word kept its old slot, so its tokens were trained (and
# counted in `_counts`) as the new word that now holds the slot, right after the learner reset that slot
# (`reset_words`) so the new word would not inherit the old one's topics. They are out of vocabulary now.
@FAST
@example(
    params={"capacity": 1, "admit_count": 0.5, "max_candidates": None, "half_life_tokens": None},
    stream=[[Counter({"a": 1, "b": 1})], [Counter({"a": 1}), Counter({"b": 1})]],  # batch 2 evicts "a" for "b"
)
@given(params=VOCAB_SETTINGS, stream=st.lists(BAGS, min_size=1, max_size=8))
def test_every_token_is_encoded_under_its_own_word(params: dict[str, Any], stream: list[list[Counter[str]]]) -> None:
    vocab = Vocabulary(**params)
    for bags in stream:
        b = vocab.encode(bags).batch
        for d, bag in enumerate(bags):
            span = slice(b.indptr[d], b.indptr[d + 1])
            encoded = {
                vocab.word(i): c for i, c in zip(b.word_ids[span].tolist(), b.counts[span].tolist(), strict=True)
            }
            assert encoded == {w: c for w, c in bag.items() if w in encoded}, (d, encoded, bag)


@SLOW
@given(
    capacity=st.integers(1, 12),
    docs=st.lists(st.lists(st.text("abcdéf", min_size=3, max_size=4), max_size=8), max_size=12),
)
def test_flat_bags_from_polars_encode_exactly_like_counters(capacity: int, docs: list[list[str]]) -> None:
    """The learner's path (count_many + hashed look-ups) and the plain one agree, batch after batch."""
    tok = Tokenizer(stop_words=())
    plain, hashed = Vocabulary(capacity, admit_count=1), Vocabulary(capacity, admit_count=1)
    texts = [" ".join(d) for d in docs]
    for start in range(0, len(texts), 3):
        chunk = texts[start : start + 3]
        flat = tok.count_many(chunk)
        assert isinstance(flat, FlatBags)
        a, b = plain.encode([tok.count(t) for t in chunk]), hashed.encode(flat)
        np.testing.assert_array_equal(a.batch.word_ids, b.batch.word_ids)
        np.testing.assert_array_equal(a.batch.counts, b.batch.counts)
        np.testing.assert_array_equal(a.recycled, b.recycled)
        assert a.oov_tokens == b.oov_tokens
    assert plain.slot_words() == hashed.slot_words()
