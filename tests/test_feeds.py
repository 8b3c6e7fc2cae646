"""Feed entries as input events (ids, URL normalisation, HTML to text), feed lists and the retry schedule.

The poller against a real broker, Redis and HTTP server is in tests/integration/test_feeds.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import feedparser
import pytest
import redis
from confluent_kafka import Producer

from service import feeds
from service.dev.localstack import free_port
from service.entries import entry_article, entry_id, html_to_text, normalise_url
from service.feeds import _SURROGATE_REF, FEED_ERROR_KINDS, FEED_RESULTS, FeedError, FeedPoller, parse, read_feed_list
from service.schemas import Article, decode_article
from service.seen import SeenIds
from tests.integration.helpers import sample

RSS = b"""<?xml version="1.0"?>
<rss version="2.0"><channel><title>Desk</title><language>en</language>
<item><guid isPermaLink="false">desk-1</guid><title>Oil &amp; gas</title>
  <link>https://desk.example/oil?utm_source=rss</link>
  <description>&lt;p&gt;OPEC &lt;b&gt;meets&lt;/b&gt;&lt;/p&gt;&lt;script&gt;track()&lt;/script&gt;</description>
  <pubDate>Mon, 23 Nov 2026 10:00:00 +0100</pubDate></item>
<item><title>No guid</title><link>HTTPS://Desk.Example:443/b?b=2&amp;a=1&amp;fbclid=z#c</link>
  <description>text</description></item>
<item><title>Neither</title><pubDate>Mon, 23 Nov 2026 11:00:00 GMT</pubDate></item>
<item><description></description></item>
</channel></rss>"""


def entries() -> list:
    return feedparser.parse(RSS).entries


def test_normalise_url_drops_what_does_not_name_the_page() -> None:
    assert normalise_url("HTTP://Example.COM:80/Path?utm_medium=x&q=1#frag") == "http://example.com/Path?q=1"
    assert normalise_url("https://example.com:8443/p?b=2&a=1") == "https://example.com:8443/p?a=1&b=2"
    assert normalise_url("https://example.com") == "https://example.com/"
    assert normalise_url("https://example.com/p?gclid=1&mc_eid=2") == "https://example.com/p"


def test_entry_id_prefers_guid_then_link_then_hash() -> None:
    e = entries()
    assert entry_id(e[0]) == "desk-1"
    assert entry_id(e[1]) == "https://desk.example/b?a=1&b=2"
    hashed = entry_id(e[2])
    assert hashed is not None and hashed.startswith("sha256:")
    assert entry_id(e[2]) == hashed  # stable
    assert entry_id({"title": "Neither", "published_parsed": e[2].published_parsed}) == hashed
    assert entry_id({"title": "Neither"}) != hashed  # the date is part of it
    assert entry_id({}) is None
    long_guid = entry_id({"id": "x" * 300})
    assert long_guid is not None and long_guid.startswith("sha256:") and len(long_guid) <= 256


def test_html_to_text() -> None:
    assert html_to_text("<p>A &amp; B</p><style>p{}</style><ul><li>one</li><li>two</li></ul>") == "A & B\none\ntwo"
    assert html_to_text("plain   words") == "plain words"
    assert html_to_text("") == ""


def test_entry_article_is_a_valid_input_event() -> None:
    e = entries()
    event = entry_article(e[0], source="Desk", language="en")
    assert event == {
        "id": "desk-1",
        "title": "Oil & gas",
        "text": "OPEC meets",
        "source": "Desk",
        "url": "https://desk.example/oil?utm_source=rss",
        "published_at": "2026-11-23T09:00:00Z",
        "language": "en",
    }
    article = Article.model_validate(event)
    assert article.published_at is not None and article.published_at.hour == 9
    assert entry_article(e[3], source="Desk") is None  # neither title nor text
    # A GUID without isPermaLink="false" and no <link>: feedparser offers the GUID as the link; it is no URL.
    guid_only = feedparser.parse(
        RSS.replace(b' isPermaLink="false"', b"").replace(b"<link>https://desk.example/oil?utm_source=rss</link>", b"")
    ).entries[0]
    assert guid_only.get("link") == "desk-1" and "url" not in entry_article(guid_only, source="Desk")


def test_parse_counts_skipped_entries_and_rejects_non_feeds() -> None:
    events, skipped = parse("https://desk.example/feed", RSS)
    assert [e["id"] for e in events][:2] == ["desk-1", "https://desk.example/b?a=1&b=2"] and skipped == 1
    import json

    assert all(isinstance(decode_article(json.dumps(e).encode(), 10_000), Article) for e in events)
    for body in (b"<html><body>a page</body></html>", b"not xml {", b""):
        with pytest.raises(FeedError) as info:
            parse("https://x.example/", body)
        assert info.value.kind == "not_a_feed"


def test_parse_keeps_a_feed_whose_entry_refers_to_a_surrogate() -> None:
    """A character reference to a UTF-16 surrogate (not a character: feedparser raises on it) becomes U+FFFD, so
    the feed's other entries are not lost with it; every such reference and no other is replaced."""
    body = RSS.replace(b"<title>Oil", b"<title>A &#xD800; &#56320; b Oil")
    events, _ = parse("https://desk.example/feed", body)
    assert [e["id"] for e in events] == [e["id"] for e in parse("https://desk.example/feed", RSS)[0]]
    assert events[0]["title"].startswith("A \ufffd \ufffd b")
    for n in range(0xD800, 0xE000):
        assert _SURROGATE_REF.fullmatch(b"&#%d;" % n) and _SURROGATE_REF.fullmatch(b"&#x%X;" % n)
        assert _SURROGATE_REF.fullmatch(b"&#x00%x;" % n)
    for n in [*range(0, 0xD800, 97), 0xD7FF, 0xE000, 0xFFFD, 0x1F600]:
        assert not _SURROGATE_REF.fullmatch(b"&#%d;" % n) and not _SURROGATE_REF.fullmatch(b"&#x%X;" % n)


def test_read_feed_list(tmp_path: Path) -> None:
    f = tmp_path / "feeds.txt"
    f.write_text("# news\nhttps://a.example/rss\n\n  http://b.example/atom  \nhttps://a.example/rss\n")
    assert read_feed_list(f, "https://c.example/x, https://a.example/rss") == [
        "https://a.example/rss",
        "http://b.example/atom",
        "https://c.example/x",
    ]
    assert read_feed_list(None, "") == []
    with pytest.raises(ValueError, match="ftp://x"):
        read_feed_list(None, "ftp://x")


def test_failing_feed_backs_off_exponentially_up_to_the_cap() -> None:
    dead = f"http://127.0.0.1:{free_port()}/feed.xml"  # nothing listens: connection refused
    seen = SeenIds(redis.Redis(port=free_port()), "unit")  # never reached: no entry gets that far
    poller = FeedPoller(
        [dead], Producer({"bootstrap.servers": "127.0.0.1:1"}), "t", seen, interval_s=10, backoff_max_s=35
    )
    try:
        waits = []
        for _ in range(4):
            before = time.monotonic()
            assert poller.poll_once(now=float("inf")) == 0
            after = time.monotonic()
            waits.append((poller.feeds[0].next_at - before, poller.feeds[0].next_at - after))
        for (most, least), full in zip(waits, [10, 20, 35, 35], strict=True):  # interval·2^(n-1), capped, ≤ 10 %
            assert 0.9 * full <= most and least <= full, waits  # jitter off: scheduled between before and after
        assert sample(poller.metrics, "topicstream_feed_errors_total", feed=dead, kind="connection") == 4
    finally:
        poller.close()


def test_a_feeds_series_start_at_zero_so_its_first_failure_is_an_increase() -> None:
    """Prometheus sees no increase in a counter that first appears at 1: the alerts on feed errors would miss the
    first one. Every series of every feed exists at 0 from the start, for every kind a fetch can fail with."""
    raised = set(re.findall(r'FeedError\(\s*"(\w+)"', Path(feeds.__file__).read_text(encoding="utf-8")))
    assert raised == set(FEED_ERROR_KINDS) - {"not_sent"}
    urls = [f"http://127.0.0.1:{free_port()}/{name}.xml" for name in ("a", "b")]
    seen = SeenIds(redis.Redis(port=free_port()), "unit")
    poller = FeedPoller(urls, Producer({"bootstrap.servers": "127.0.0.1:1"}), "t", seen, interval_s=10)
    try:
        assert sample(poller.metrics, "topicstream_feed_interval_seconds") == 10
        for url in urls:
            for kind in FEED_ERROR_KINDS:
                assert sample(poller.metrics, "topicstream_feed_errors_total", feed=url, kind=kind) == 0, kind
            for result in FEED_RESULTS:
                assert sample(poller.metrics, "topicstream_feed_requests_total", feed=url, result=result) == 0
            for name in ("seen", "produced", "duplicate", "skipped"):
                assert sample(poller.metrics, f"topicstream_feed_entries_{name}_total", feed=url) == 0, name
    finally:
        poller.close()
