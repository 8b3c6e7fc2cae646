"""Feed entries as input events: a stable id per entry, HTML turned into plain text, the article schema.

An entry's id must be the same every time the entry is read — from the same feed after a restart, or from two
polls that overlap — because the seen-id store (:mod:`service.seen`) deduplicates on it. In order of preference:

1. the entry's GUID (RSS ``<guid>``, Atom ``<id>``), verbatim: the publisher's promise of a stable, unique id;
2. else its link, normalised (:func:`normalise_url`): the scheme and host lower-case, the default port, the
   fragment and tracking parameters (``utm_*``, ``fbclid``, ...) dropped, the other query parameters sorted, so
   the same article shared with different campaign tags is one article;
3. else ``sha256:`` and a hash of its title and date.

An id longer than the schema's 256 characters is replaced by ``sha256:`` and its hash.
"""

from __future__ import annotations

import calendar
import hashlib
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["entry_article", "entry_id", "html_to_text", "normalise_url"]

MAX_ID = 256  # the input schema's limit (service.schemas.Article.id)

# Query parameters that say who shared a link, not what it points to.
_TRACKING_PREFIXES = ("utm_",)
_TRACKING_PARAMS = frozenset(
    {"fbclid", "gclid", "dclid", "msclkid", "mc_cid", "mc_eid", "igshid", "yclid", "_hsenc", "_hsmi", "mkt_tok"}
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalise_url(url: str) -> str:
    """``url`` with its scheme and host lower-case, without the default port, the fragment or tracking parameters.

    >>> normalise_url("HTTPS://News.Example.COM:443/a/B?utm_source=x&b=2&a=1#top")
    'https://news.example.com/a/B?a=1&b=2'
    """
    try:
        parts = urlsplit(url.strip())
    except ValueError:  # not a URL urllib reads (an unclosed "[" of an IPv6 host): kept as written
        return url.strip()
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:  # a port that is not a number: keep the location as it was written
        port, host = None, parts.netloc.lower()
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if parts.username is not None:
        netloc = f"{parts.username}@{netloc}"
    query = sorted(
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if not k.lower().startswith(_TRACKING_PREFIXES) and k.lower() not in _TRACKING_PARAMS
    )
    return urlunsplit((scheme, netloc, parts.path or "/", urlencode(query), ""))


def _hashed(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


def _when(entry: Mapping[str, Any]) -> datetime | None:
    """The entry's publication (else update) time, UTC; feedparser gives it as a UTC ``struct_time``."""
    for key in ("published_parsed", "updated_parsed"):
        t = entry.get(key)
        if isinstance(t, time.struct_time):
            try:
                return datetime.fromtimestamp(calendar.timegm(t), tz=timezone.utc)
            except (OverflowError, ValueError, OSError):
                continue
    return None


def entry_id(entry: Mapping[str, Any]) -> str | None:
    """The stable id of a feedparser entry (see the module docstring), or None when it has nothing to go by."""
    guid = str(entry.get("id") or "").strip()
    if guid:
        return guid if len(guid) <= MAX_ID else _hashed(guid)
    link = str(entry.get("link") or "").strip()
    if link:
        url = normalise_url(link)
        return url if len(url) <= MAX_ID else _hashed(url)
    title = str(entry.get("title") or "").strip()
    when = _when(entry)
    if not title and when is None:
        return None
    return _hashed(title, when.isoformat() if when else "")


class _TextExtractor(HTMLParser):
    """Collects the text of an HTML fragment; block elements become line breaks, scripts and styles vanish."""

    _BLOCKS = frozenset(
        {"p", "div", "br", "li", "ul", "ol", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote"}
    )
    _HIDDEN = frozenset({"script", "style", "template", "noscript"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """Plain text of an HTML fragment (entities decoded, tags dropped, whitespace collapsed per line).

    >>> html_to_text("<p>Oil &amp; gas <b>rise</b></p><script>x()</script><p>OPEC meets</p>")
    'Oil & gas rise\\nOPEC meets'
    """
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def _body(entry: Mapping[str, Any]) -> str:
    """The longest of the entry's content blocks and its summary, as plain text."""
    candidates = [str(c.get("value") or "") for c in entry.get("content") or [] if isinstance(c, Mapping)]
    candidates.append(str(entry.get("summary") or ""))
    return html_to_text(max(candidates, key=len))


def entry_article(entry: Mapping[str, Any], source: str, language: str | None = None) -> dict[str, Any] | None:
    """An input event (``service.schemas.Article`` fields) for a feedparser entry; None when it has no id, or
    neither a title nor any text (the schema requires one of them)."""
    article_id = entry_id(entry)
    title = html_to_text(str(entry.get("title") or ""))
    text = _body(entry)
    if article_id is None or not (title or text):
        return None
    event: dict[str, Any] = {"id": article_id, "title": title or None, "text": text, "source": source}
    link = str(entry.get("link") or "").strip()
    if link.lower().startswith(("http://", "https://")):  # feedparser also takes a GUID that is no URL as the link
        event["url"] = link
    when = _when(entry)
    if when is not None:
        event["published_at"] = when.isoformat().replace("+00:00", "Z")
    if language:
        event["language"] = language
    return {k: v for k, v in event.items() if v is not None}
