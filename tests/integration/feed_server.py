"""A local HTTP server of RSS/Atom feeds for the tests of ``topicstream feeds`` (``test_feeds.py``) and of the
feed poller's alerts and dashboard panels (``test_prometheus.py``)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FeedServer:
    """Serves ``feeds[path] = bytes`` on 127.0.0.1 with ETag and Last-Modified; ``/slow`` answers after
    ``release`` is set (never, within a test's timeout); ``/trickle``, ``/chunked``, ``/retry`` and ``/badstatus``
    answer as hostile or broken servers do (see ``do_GET``)."""

    feeds: dict[str, bytes] = field(default_factory=dict)
    conditional_hits: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    def url(self, path: str) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/slow":
                    owner.release.wait(30)
                if self.path == "/trickle":  # headers at once, then a byte every 0.2 s: each read is quick
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    while not owner.release.wait(0.2):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    return
                if self.path == "/retry":  # a Retry-After that str.isdigit() takes and float() refuses
                    self.send_response(503)
                    self.send_header("Retry-After", "\u00b2")
                    self.end_headers()
                    return
                if self.path == "/badstatus":  # a status line with terminal escapes and a forged log line
                    self.wfile.write(b"XTTP/1.1 \x1b[2J\x1b[1;1H2026-11-27 INFO service.feeds: produced 1\r\n\r\n")
                    return
                if self.path == "/chunked":  # a chunk size that is not hex: http.client's IncompleteRead
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"zz\r\n<rss/>\r\n")
                    return
                body = owner.feeds.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    owner.conditional_hits.append(self.path)
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("ETag", etag)
                self.send_header("Last-Modified", formatdate(usegmt=True))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # the timed-out client of /slow has hung up: a broken pipe here is expected

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def rss(items: list[tuple[str | None, str | None, str]]) -> bytes:
    """RSS 2.0 with items (guid, link, title); a None guid or link is left out."""
    parts = []
    for guid, link, title in items:
        g = f"<guid isPermaLink='false'>{guid}</guid>" if guid else ""
        lk = f"<link>{link}</link>" if link else ""
        parts.append(
            f"<item>{g}{lk}<title>{title}</title><description>&lt;p&gt;{title} story &amp;amp; more"
            f"&lt;/p&gt;</description><pubDate>Mon, 23 Nov 2026 10:00:00 GMT</pubDate></item>"
        )
    return (
        f"<?xml version='1.0'?><rss version='2.0'><channel><title>Wire</title>{''.join(parts)}</channel></rss>"
    ).encode()


def atom(entries: list[tuple[str, str]]) -> bytes:
    body = "".join(
        f"<entry><id>{i}</id><title>{t}</title><updated>2026-11-23T10:00:00Z</updated>"
        f"<link href='https://atom.example/{i}'/><content type='html'>&lt;b&gt;{t}&lt;/b&gt; text</content></entry>"
        for i, t in entries
    )
    return (
        "<?xml version='1.0'?><feed xmlns='http://www.w3.org/2005/Atom'><title>Atom desk</title>"
        f"<id>urn:desk</id><updated>2026-11-23T10:00:00Z</updated>{body}</feed>"
    ).encode()
