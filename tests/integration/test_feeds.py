"""`topicstream feeds` against a real broker, a real Redis and feeds served by a local HTTP server.

The server serves what each test writes: RSS 2.0, Atom, RSS without GUIDs, a feed that answers 304 to a matching
conditional request (every feed here does), one that never answers in time, one that is not XML, and ``/chunked``,
a body whose chunked encoding is broken.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from typer.testing import CliRunner

from service.cli import app
from service.feeds import FeedPoller
from service.kafka import make_producer
from service.seen import SeenIds
from service.settings import Settings

from .feed_server import FeedServer, atom, rss
from .helpers import read_all, sample

pytestmark = pytest.mark.integration


@pytest.fixture
def server() -> Iterator[FeedServer]:
    srv = FeedServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def poller(s: Settings, srv: FeedServer, paths: list[str], **kwargs: float) -> FeedPoller:
    client = redis.Redis.from_url(s.redis_url)
    return FeedPoller(
        [srv.url(p) for p in paths],
        make_producer(s),
        s.input_topic,
        SeenIds(client, s.redis_prefix, **kwargs),  # type: ignore[arg-type]
        interval_s=60,
        timeout_s=1.0,
    )


def ids_of(s: Settings, expected: int) -> list[str]:
    msgs = read_all(s, s.input_topic, expected, timeout=30)
    for m in msgs:
        assert m.key().decode() == json.loads(m.value())["id"]
    return [json.loads(m.value())["id"] for m in msgs]


PATHS = ["/rss.xml", "/atom.xml", "/noguid.xml", "/slow", "/page.html"]


def write_feeds(srv: FeedServer) -> None:
    srv.feeds["/rss.xml"] = rss([("r1", "https://wire.example/1", "Oil"), ("r2", "https://wire.example/2", "Gas")])
    srv.feeds["/atom.xml"] = atom([("urn:a1", "Opec"), ("urn:a2", "Rates")])
    srv.feeds["/noguid.xml"] = rss(
        [
            (None, "HTTPS://Wire.Example/3?utm_source=feed&amp;id=3#top", "Linked"),
            (None, "https://wire.example/3?id=3", "Same page, other campaign"),
            (None, None, "No link either"),
        ]
    )
    srv.feeds["/slow"] = rss([("s1", None, "Never arrives")])
    srv.feeds["/page.html"] = b"<html><body><p>Not a feed</p></body></html>"


def test_poll_restart_and_conditional_get(settings: Settings, server: FeedServer) -> None:
    s = settings
    write_feeds(server)
    first = poller(s, server, PATHS)
    try:
        assert first.poll_once() == 6
        m = first.metrics
        assert sample(m, "topicstream_feed_errors_total", feed=server.url("/slow"), kind="timeout") == 1
        assert sample(m, "topicstream_feed_errors_total", feed=server.url("/page.html"), kind="not_a_feed") == 1
        # One fetch, one count: the page answered 200 but is no feed, so it counts as an error only.
        page = server.url("/page.html")
        assert sample(m, "topicstream_feed_requests_total", feed=page, result="error") == 1
        assert not sample(m, "topicstream_feed_requests_total", feed=page, result="200")
        assert (
            sample(m, "topicstream_feed_entries_duplicate_total", feed=server.url("/noguid.xml")) == 1
        )  # one page, two links
        # The second poll is conditional: nothing changed, so 304s and nothing produced.
        assert first.poll_once(now=float("inf")) == 0
        assert sorted(server.conditional_hits) == ["/atom.xml", "/noguid.xml", "/rss.xml"]
        assert sample(m, "topicstream_feed_requests_total", feed=server.url("/rss.xml"), result="304") == 1
        # A new entry appears in one feed.
        server.feeds["/rss.xml"] = rss([("r3", None, "Pipeline"), ("r1", "https://wire.example/1", "Oil")])
        assert first.poll_once(now=float("inf")) == 1
    finally:
        first.close()

    # A restart: a new poller with no HTTP state fetches everything again and produces nothing.
    again = poller(s, server, PATHS)
    try:
        assert again.poll_once() == 0
        assert sample(again.metrics, "topicstream_feed_entries_duplicate_total", feed=server.url("/atom.xml")) == 2
    finally:
        again.close()

    ids = ids_of(s, 7)
    assert len(ids) == len(set(ids)) == 7
    hashed = [i for i in ids if i.startswith("sha256:")]
    assert len(hashed) == 1
    assert set(ids) - set(hashed) == {"r1", "r2", "r3", "urn:a1", "urn:a2", "https://wire.example/3?id=3"}
    events = {json.loads(m.value())["id"]: json.loads(m.value()) for m in read_all(s, s.input_topic, 7, timeout=30)}
    assert events["urn:a1"]["text"] == "Opec text" and events["urn:a1"]["source"] == "Atom desk"
    assert events["r1"]["text"] == "Oil story & more" and events["r1"]["published_at"] == "2026-11-23T10:00:00Z"


@pytest.mark.timeout(60)  # the poll of the old fetch never returned
def test_a_feed_that_trickles_its_body_times_out_and_holds_up_no_other(settings: Settings, server: FeedServer) -> None:
    """A server that sends its headers, then a byte every 0.2 s: each read returns quickly, so a timeout per
    read never fires. The fetch must still end at its timeout (1 s here) and the other feed's entries go out.
    Before, the poll waited for the whole body (100,000 bytes: five and a half hours)."""
    write_feeds(server)
    p = poller(settings, server, ["/rss.xml", "/trickle"])
    try:
        t0 = time.monotonic()
        assert p.poll_once() == 2
        assert time.monotonic() - t0 < 10
        assert p.failed == [server.url("/trickle")]
        assert sample(p.metrics, "topicstream_feed_errors_total", feed=server.url("/trickle"), kind="timeout") == 1
    finally:
        p.close()


def test_overlapping_pollers_produce_each_entry_once(settings: Settings, server: FeedServer) -> None:
    s = settings
    feeds = {f"/f{j}.xml": rss([(f"g{j}-{i}", None, f"Story {i}") for i in range(20)]) for j in range(3)}
    feeds["/shared.xml"] = rss([(f"g0-{i}", None, f"Story {i}") for i in range(10, 30)])  # overlaps /f0.xml
    server.feeds.update(feeds)
    pollers = [poller(s, server, list(feeds)) for _ in range(3)]
    counts: list[int] = []
    try:
        threads = [threading.Thread(target=lambda p=p: counts.append(p.poll_once())) for p in pollers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for p in pollers:
            p.close()
    distinct = 3 * 20 + 10
    assert sum(counts) == distinct, counts
    ids = ids_of(s, distinct)
    assert len(ids) == len(set(ids)) == distinct


def test_a_broken_answer_or_an_entry_too_large_to_send_stops_nothing(settings: Settings, server: FeedServer) -> None:
    """A feed whose chunked encoding is broken is that feed's error (kind ``connection``), and an entry larger
    than the producer takes is counted (``not_sent``) and left unclaimed, to be tried again at the next poll: the
    poll goes on and the other entries are produced."""
    s = settings
    server.feeds["/chunked"] = b"unused"
    server.feeds["/big.xml"] = rss([("huge", None, "x " * 600_000), ("fine", None, "Small story")])
    p = poller(s, server, ["/chunked", "/big.xml", "/rss.xml"])
    server.feeds["/rss.xml"] = rss([("r1", "https://wire.example/1", "Oil")])
    try:
        assert p.poll_once() == 2
        m = p.metrics
        assert sample(m, "topicstream_feed_errors_total", feed=server.url("/chunked"), kind="connection") == 1
        assert sample(m, "topicstream_feed_errors_total", feed=server.url("/big.xml"), kind="not_sent") == 1
        assert p.seen.claim(["huge"]) == [True]  # released, so the next poll may try it again
    finally:
        p.close()
    assert sorted(ids_of(s, 2)) == ["fine", "r1"]


def test_hostile_answers_and_entries_fail_their_feed_or_entry_not_the_poller(
    settings: Settings, server: FeedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A review's findings: a ``Retry-After`` of "²" (``str.isdigit`` takes it, ``float`` does not) and an entry
    whose link urllib cannot read ("http://[bad", no guid) raised ValueError out of the poll, so the poller exited,
    every feed with it, and again at every restart; and a status line's terminal escapes went into a log line as
    the server sent them. Now the first is an HTTP error of that feed, the entry's id is its link as written, and
    the escapes are escaped."""
    s = settings
    server.feeds["/badlink.xml"] = rss([(None, "http://[bad", "Bad link story"), ("fine", None, "Fine story")])
    server.feeds["/rss.xml"] = rss([("r1", "https://wire.example/1", "Oil")])
    p = poller(s, server, ["/retry", "/badstatus", "/badlink.xml", "/rss.xml"])
    try:
        with caplog.at_level(logging.WARNING, logger="service.feeds"):
            assert p.poll_once() == 3
        m = p.metrics
        assert sample(m, "topicstream_feed_errors_total", feed=server.url("/retry"), kind="http") == 1
        assert sample(m, "topicstream_feed_errors_total", feed=server.url("/badstatus"), kind="connection") == 1
        assert "\x1b" not in caplog.text and "\\x1b" in caplog.text
    finally:
        p.close()
    assert sorted(ids_of(s, 3)) == ["fine", "http://[bad", "r1"]


def test_seen_ids_are_bounded_by_size(settings: Settings, server: FeedServer) -> None:
    s = settings
    server.feeds["/big.xml"] = rss([(f"b{i}", None, f"Story {i}") for i in range(30)])
    p = poller(s, server, ["/big.xml"], max_ids=10)
    try:
        assert p.poll_once() == 30
        assert len(p.seen) == 10
    finally:
        p.close()


def test_feeds_command(settings: Settings, server: FeedServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = settings
    write_feeds(server)
    listing = tmp_path / "feeds.txt"
    listing.write_text("# two good feeds and a page\n" + "\n".join(server.url(p) for p in PATHS if p != "/slow"))
    env = {
        "TOPICSTREAM_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
        "TOPICSTREAM_REDIS_URL": s.redis_url,
        "TOPICSTREAM_INPUT_TOPIC": s.input_topic,
        "TOPICSTREAM_REDIS_PREFIX": s.redis_prefix,
        "TOPICSTREAM_METRICS_PORT": "0",
        "TOPICSTREAM_FEEDS": server.url("/slow"),
        "TOPICSTREAM_FEED_TIMEOUT_S": "1",
    }
    runner = CliRunner()
    result = runner.invoke(app, ["feeds", str(listing), "--once"], env=env)
    # The page and /slow fail: the others' entries are produced, and a cron job sees exit 1 naming the two.
    assert result.exit_code == 1, result.output
    assert "polling 5 feed(s)" in result.output and "produced 6 new entries" in result.output
    (failed,) = [line for line in result.output.splitlines() if "2 of 5 feeds failed: " in line]
    assert server.url("/slow") in failed and server.url("/page.html") in failed
    result = runner.invoke(app, ["feeds", str(listing), "--once"], env=env)
    assert "produced 0 new entries" in result.output
    assert len(ids_of(s, 6)) == 6
    bad = runner.invoke(app, ["feeds", "--once"], env={**env, "TOPICSTREAM_FEEDS": "ftp://nope"})
    assert bad.exit_code == 2 and "TOPICSTREAM_FEEDS" in bad.output and "Traceback" not in bad.output


def test_a_claim_left_by_a_crash_expires_so_the_entry_is_never_lost(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    crashed = SeenIds(client, settings.redis_prefix, claim_s=0.5)
    other = SeenIds(client, settings.redis_prefix, claim_s=0.5)
    assert crashed.claim(["x", "y"]) == [True, True]
    crashed.mark(["y"])  # "x" was produced but its poller died before marking it
    assert other.claim(["x", "y"]) == [False, False]
    import time

    time.sleep(0.6)
    assert other.claim(["x", "y"]) == [True, False]
    other.release(["x"])
    assert "y" in other and "x" not in other and len(other) == 1


def test_a_redis_that_goes_away_costs_polls_not_the_poller(settings: Settings, server: FeedServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The poller keeps the seen ids in Redis. Redis killed: the polls fail and are tried again after a backoff;
    Redis back (empty): the entries are produced. Before, the first failed poll ended the poller (exit 3)."""
    from .redis_faults import RedisServer

    redis_server = RedisServer(tmp_path)
    redis_server.start()
    server.feeds["/rss.xml"] = rss([("rd1", None, "Before")])
    p = FeedPoller(
        [server.url("/rss.xml")],
        make_producer(settings),
        settings.input_topic,
        SeenIds(redis.Redis.from_url(redis_server.url(), socket_timeout=2), settings.redis_prefix),
        interval_s=0.5,
        timeout_s=1.0,
    )
    stop = threading.Event()
    thread = threading.Thread(target=p.run, args=(stop,), daemon=True)
    try:
        redis_server.kill()
        thread.start()
        time.sleep(3)  # several polls meet no Redis
        assert thread.is_alive(), "the poller ended when Redis went away"
        redis_server.start()
        assert ids_of(settings, 1) == ["rd1"]
    finally:
        stop.set()
        thread.join(30)
        p.close()
        redis_server.kill()
    assert not thread.is_alive()
