"""``topicstream feeds``: poll RSS and Atom feeds and produce their new entries to the input topic.

Each feed is fetched with a conditional GET (``If-None-Match`` / ``If-Modified-Since`` from its last answer), by
urllib with a per-request deadline and a size limit, on a small thread pool: a feed that hangs costs at most its
own timeout and never delays the others. The bytes go to feedparser; entries become input events
(:mod:`service.entries`) keyed by a stable id, and the seen-id store (:mod:`service.seen`) makes sure a restart
or an overlapping poll never produces one twice: claim the ids, produce, wait for the delivery reports, mark the
acknowledged ones seen.

A feed that fails (timeout, connection refused, an HTTP error, a body that is not a feed) is retried after
``interval · 2^(failures-1)`` seconds, capped at ``backoff_max_s``, less up to 10 % of jitter
(:class:`service.backoff.Backoff`), and never sooner than a ``Retry-After`` header asks (up to the same cap); its
first success resets that.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, InitVar, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import feedparser
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from prometheus_client import CollectorRegistry, Counter, Gauge

from . import __version__, health
from .backoff import Backoff
from .entries import entry_article
from .seen import SeenIds

__all__ = [
    "FEED_ERROR_KINDS",
    "FEED_RESULTS",
    "FeedError",
    "FeedMetrics",
    "FeedPoller",
    "FeedState",
    "Fetched",
    "fetch",
    "read_feed_list",
]

log = logging.getLogger(__name__)

MAX_FEED_BYTES = 20 * 1024 * 1024
#: The ``kind`` of ``topicstream_feed_errors_total``: a failed fetch's :attr:`FeedError.kind`, or ``not_sent`` (an
#: entry the producer refused).
FEED_ERROR_KINDS = ("timeout", "connection", "http", "too_large", "not_a_feed", "not_sent")
#: The ``result`` of ``topicstream_feed_requests_total`` (another 2xx status counts under its own code).
FEED_RESULTS = ("200", "304", "error")
USER_AGENT = f"topicstream-feeds/{__version__} (+https://github.com/topicstream)"


class FeedError(Exception):
    """A fetch or parse failure; ``kind`` is a short, stable metric label."""

    def __init__(self, kind: str, detail: str, retry_after: float = 0.0) -> None:
        # The detail may be a server's bytes (a status line): control characters escaped, so that it cannot
        # clear the terminal or forge a log line, and cut to a line's length.
        detail = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in detail[:500])
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.retry_after = retry_after


def read_feed_list(file: Path | None, setting: str = "") -> list[str]:
    """Feed URLs from ``file`` (one per line; blank lines and ``#`` comments skipped) and from ``setting``
    (``TOPICSTREAM_FEEDS``: URLs separated by spaces or commas), without repeats, in order.

    Raises ValueError naming the first entry that is not an http(s) URL.
    """
    items: list[str] = []
    if file is not None:
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                items.append(line.strip())
    items += setting.replace(",", " ").split()
    urls: list[str] = []
    for url in items:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not an http(s) URL: {url!r}")
        if url not in urls:
            urls.append(url)
    return urls


@dataclass(frozen=True)
class Fetched:
    """A feed's answer: ``body`` is None for 304 Not Modified."""

    status: int
    body: bytes | None
    etag: str | None
    modified: str | None


def _retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` header asks for (a number or an HTTP date); 0 when absent or unreadable."""
    if not value:
        return 0.0
    text = value.strip()
    if text.isascii() and text.isdigit():  # not "²", which isdigit() takes and float() refuses
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - time.time())


def fetch(url: str, etag: str | None, modified: str | None, timeout: float) -> Fetched:
    """GET ``url`` conditionally, within ``timeout`` seconds in all; raises :class:`FeedError`."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/rss+xml, application/atom+xml, application/xml;q=0.9"}
    if etag:
        headers["If-None-Match"] = etag
    if modified:
        headers["If-Modified-Since"] = modified
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            chunks: list[bytes] = []
            size = 0
            # read1: what one receive brings, so a server that trickles its body meets the deadline (read(n)
            # waits for n bytes, each receive within the socket timeout: for ever at one byte a second).
            while chunk := resp.read1(65536):
                size += len(chunk)
                if size > MAX_FEED_BYTES:
                    raise FeedError("too_large", f"more than {MAX_FEED_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise FeedError("timeout", f"body not read within {timeout:g}s")
                chunks.append(chunk)
            return Fetched(resp.status, b"".join(chunks), resp.headers.get("ETag"), resp.headers.get("Last-Modified"))
    except urllib.error.HTTPError as e:
        if e.code == 304:
            return Fetched(304, None, e.headers.get("ETag") or etag, e.headers.get("Last-Modified") or modified)
        raise FeedError("http", f"HTTP {e.code}", _retry_after(e.headers.get("Retry-After"))) from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            raise FeedError("timeout", f"no answer within {timeout:g}s") from None
        raise FeedError("connection", str(e.reason)) from None
    except TimeoutError:
        raise FeedError("timeout", f"no answer within {timeout:g}s") from None
    except (OSError, ValueError, http.client.HTTPException) as e:  # resets, bad URLs, broken chunks, bad headers
        raise FeedError("connection", str(e) or type(e).__name__) from None


#: A character reference to a UTF-16 surrogate (``&#xD800;`` … ``&#xDFFF;``, or in decimal): not a character, so
#: not XML; feedparser raises on it (the whole feed would fail), so :func:`parse` makes it U+FFFD first.
_SURROGATE_REF = re.compile(
    rb"&#(?:[xX]0*[dD][89a-fA-F][0-9a-fA-F]{2}|0*(?:5529[6-9]|55[3-9][0-9]{2}|56[0-9]{3}|57[0-2][0-9]{2}|573[0-3][0-9]|5734[0-3]));"
)


def parse(url: str, body: bytes) -> tuple[list[dict[str, Any]], int]:
    """Input events of a feed's bytes, and how many entries were skipped (no id, no content, or text that cannot
    be sent as UTF-8); raises :class:`FeedError` when the bytes are not a feed (feedparser found neither a feed
    format nor an entry, or failed on them)."""
    try:
        parsed = feedparser.parse(_SURROGATE_REF.sub(b"&#xFFFD;", body))
    except Exception as e:  # a parser failure on hostile bytes is this feed's error, not the poller's
        raise FeedError("not_a_feed", f"{type(e).__name__}: {e}") from None
    if not parsed.get("version") and not parsed.get("entries"):
        why = parsed.get("bozo_exception") or "no RSS or Atom element"
        raise FeedError("not_a_feed", str(why))
    feed = parsed.get("feed", {})
    source = str(feed.get("title") or urlsplit(url).hostname or url).strip()
    language = feed.get("language") or None
    events, skipped = [], 0
    for entry in parsed.entries:
        event = entry_article(entry, source=source, language=language)
        if event is None or not _sendable(event):
            skipped += 1
        else:
            events.append(event)
    return events, skipped


def _sendable(event: dict[str, Any]) -> bool:
    """Whether ``event`` encodes as UTF-8 JSON (a lone surrogate from a broken encoding would not)."""
    try:
        json.dumps(event, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError):
        log.warning("feed entry %r skipped: its text is not valid Unicode", str(event.get("id"))[:200])
        return False
    return True


class FeedMetrics:
    """The poller's Prometheus series (its own registry), each labelled by feed URL; :meth:`watch` starts a
    feed's at 0."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        counter = partial(Counter, registry=r)
        self.requests = counter(
            "topicstream_feed_requests_total", "Feed fetches by result (200, 304, error)", ["feed", "result"]
        )
        self.errors = counter(
            "topicstream_feed_errors_total",
            f"Failed feed fetches by kind ({', '.join(FEED_ERROR_KINDS[:-1])}), and entries the producer refused "
            "(not_sent: e.g. larger than the broker takes; tried again at the next poll)",
            ["feed", "kind"],
        )
        self.seen = counter("topicstream_feed_entries_seen_total", "Entries read from a feed", ["feed"])
        self.produced = counter(
            "topicstream_feed_entries_produced_total",
            "New entries acknowledged by the broker on the input topic",
            ["feed"],
        )
        self.duplicates = counter(
            "topicstream_feed_entries_duplicate_total",
            "Entries skipped because their id was produced (or is being produced) already",
            ["feed"],
        )
        self.skipped = counter(
            "topicstream_feed_entries_skipped_total", "Entries with no id or with neither a title nor text", ["feed"]
        )
        self.last_success = Gauge(
            "topicstream_feed_last_success_timestamp_seconds", "Unix time of the last good fetch", ["feed"], registry=r
        )
        self.interval = Gauge(
            "topicstream_feed_interval_seconds",
            "Seconds between two fetches of one feed (--interval); a failing feed waits longer (backoff)",
            registry=r,
        )

    def watch(self, url: str) -> None:
        """Create feed ``url``'s counters at 0. A counter that first appears at 1 shows no increase to Prometheus's
        ``rate()`` and ``increase()``, so the first refused entry would raise no alert; and the alert rules find
        the series they select before anything went wrong."""
        for result in FEED_RESULTS:
            self.requests.labels(feed=url, result=result)
        for kind in FEED_ERROR_KINDS:
            self.errors.labels(feed=url, kind=kind)
        for counter in (self.seen, self.produced, self.duplicates, self.skipped):
            counter.labels(feed=url)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        if port:
            health.serve(self.registry, port, addr)


@dataclass
class FeedState:
    """What the poller remembers about one feed between polls (in memory: a restart fetches unconditionally
    once, and the seen-id store absorbs the repeats)."""

    url: str
    backoff: Backoff
    etag: str | None = None
    modified: str | None = None
    next_at: float = 0.0  # monotonic time of the next fetch


@dataclass
class _Batch:
    acked: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self, err: KafkaError | None, msg: Message) -> None:
        key = (msg.key() or b"").decode("utf-8")
        with self.lock:
            if err is None:
                self.acked.add(key)
            else:
                self.failed.append(f"{key}: {err}")


@dataclass(eq=False)
class FeedPoller:
    """Poll feeds and produce their new entries; one instance per process (see the module docstring).

    ``backoff_max_s`` is raised to ``interval_s`` when smaller (a failing feed never waits less than a good one);
    ``workers`` threads (at most one a feed) fetch the due feeds of a poll at once.
    """

    urls: InitVar[Iterable[str]]
    producer: Producer
    topic: str
    seen: SeenIds
    _: KW_ONLY
    interval_s: float = 300.0
    timeout_s: float = 10.0
    backoff_max_s: float = 3600.0
    workers: InitVar[int] = 8
    metrics: FeedMetrics = field(default_factory=FeedMetrics)
    feeds: list[FeedState] = field(init=False)
    #: The feeds whose fetch failed in the last poll (``topicstream feeds --once`` exits 1 with them).
    failed: list[str] = field(init=False, default_factory=list)

    def __post_init__(self, urls: Iterable[str], workers: int) -> None:
        self.backoff_max_s = max(self.backoff_max_s, self.interval_s)
        self.feeds = [FeedState(u, Backoff(base_s=self.interval_s, cap_s=self.backoff_max_s, jitter=0.1)) for u in urls]
        if not self.feeds:
            raise ValueError("no feeds to poll")
        self.metrics.interval.set(self.interval_s)
        for feed in self.feeds:
            self.metrics.watch(feed.url)
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(self.feeds))), thread_name_prefix="feed")

    def poll_once(self, now: float | None = None) -> int:
        """Fetch every feed that is due (all at once, each within its timeout), produce the new entries, wait for
        the broker; returns the number of entries produced. Raises DeliveryError if the broker refused any (their
        claims are released first, so the next poll retries them)."""
        now = time.monotonic() if now is None else now
        due = [f for f in self.feeds if f.next_at <= now]
        results = list(self._pool.map(self._fetch, due))
        events: list[tuple[FeedState, dict[str, Any]]] = []
        done: list[tuple[FeedState, Fetched]] = []
        self.failed = [feed.url for feed, result in zip(due, results, strict=True) if isinstance(result, FeedError)]
        for feed, result in zip(due, results, strict=True):
            if isinstance(result, FeedError):
                self._failed(feed, result)
                continue
            fetched, parsed = result
            done.append((feed, fetched))
            events += [(feed, e) for e in parsed]
        produced = self._produce(events)
        for feed, fetched in done:
            feed.etag, feed.modified = fetched.etag, fetched.modified
            feed.backoff.succeeded()
            feed.next_at = time.monotonic() + self.interval_s
            self.metrics.last_success.labels(feed=feed.url).set(time.time())
        return produced

    def _fetch(self, feed: FeedState) -> tuple[Fetched, list[dict[str, Any]]] | FeedError:
        m = self.metrics
        try:
            fetched = fetch(feed.url, feed.etag, feed.modified, self.timeout_s)
            events, skipped = ([], 0) if fetched.body is None else parse(feed.url, fetched.body)
        except FeedError as e:
            return e  # counted as result="error" (_failed), once
        except Exception as e:  # a feed's bytes this code did not foresee fail that feed, never the poller
            log.exception("feed %s: unexpected %s", feed.url, type(e).__name__)
            return FeedError("not_a_feed", f"{type(e).__name__}: {e}")
        m.requests.labels(feed=feed.url, result=str(fetched.status)).inc()
        m.seen.labels(feed=feed.url).inc(len(events) + skipped)
        m.skipped.labels(feed=feed.url).inc(skipped)
        return fetched, events

    def _failed(self, feed: FeedState, error: FeedError) -> None:
        now = time.monotonic()
        delay = max(feed.backoff.failed(now), min(error.retry_after, self.backoff_max_s))
        feed.next_at = now + delay
        self.metrics.requests.labels(feed=feed.url, result="error").inc()
        self.metrics.errors.labels(feed=feed.url, kind=error.kind).inc()
        log.warning("feed %s: %s (failure %d; next try in %.0fs)", feed.url, error, feed.backoff.failures, delay)

    def _produce(self, events: list[tuple[FeedState, dict[str, Any]]]) -> int:
        from .kafka import DeliveryError

        if not events:
            return 0
        ids = [e["id"] for _, e in events]
        claimed = self.seen.claim(ids)
        batch = _Batch()
        mine: list[str] = []
        for (feed, event), ok in zip(events, claimed, strict=True):
            if not ok:
                self.metrics.duplicates.labels(feed=feed.url).inc()
                continue
            value = json.dumps(event, ensure_ascii=False).encode("utf-8")
            while True:
                try:
                    self.producer.produce(self.topic, value=value, key=event["id"].encode(), on_delivery=batch.report)
                    mine.append(event["id"])
                    break
                except BufferError:
                    self.producer.poll(0.1)
                except KafkaException as e:  # e.g. larger than the broker takes: released, tried again next poll
                    self.seen.release([event["id"]])
                    self.metrics.errors.labels(feed=feed.url, kind="not_sent").inc()
                    log.warning("feed %s: entry %r (%d bytes) not sent: %s", feed.url, event["id"], len(value), e)
                    break
        remaining = self.producer.flush(60.0)
        acked = [i for i in mine if i in batch.acked]
        self.seen.mark(acked)
        self.seen.release([i for i in mine if i not in batch.acked])
        by_id = {e["id"]: feed for feed, e in events}
        for i in acked:
            self.metrics.produced.labels(feed=by_id[i].url).inc()
        if remaining or batch.failed:
            detail = batch.failed[0] if batch.failed else f"{remaining} unacknowledged after 60s"
            raise DeliveryError(f"{len(mine) - len(acked)} feed entries not acknowledged, e.g. {detail}")
        return len(acked)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set, sleeping until the next feed is due. Redis away (the seen ids) costs the
        poll, not the poller: it is tried again after a backoff, and the feeds' entries are fetched again."""
        import redis

        redis_down = Backoff(base_s=1.0, cap_s=min(60.0, self.backoff_max_s))
        while not stop.is_set():
            try:
                n = self.poll_once()
            except redis.exceptions.RedisError as e:
                delay = redis_down.failed(time.monotonic())
                log.warning("Redis (the seen ids) failed: %s; polling again in %.0fs", e, delay)
                stop.wait(delay)
                continue
            redis_down.succeeded()
            if n:
                log.info("produced %d new entries", n)
            wait = min(f.next_at for f in self.feeds) - time.monotonic()
            stop.wait(max(0.0, wait))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.producer.flush(10.0)
