"""The events on the wire (README.md, "Events"): input articles, output mixtures.

Decoding never raises: :func:`decode_article` returns either an :class:`Article` or a :class:`Rejection` whose
``reason`` is a short, stable code (used as a metric label and a dead-letter header) and whose ``detail`` says
what exactly was wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

__all__ = [
    "BOM",
    "Article",
    "ModelRef",
    "Rejection",
    "TopicEvent",
    "TopicWeight",
    "decode_article",
]

ArticleId = Annotated[str, StringConstraints(min_length=1, max_length=256)]

#: The start of an RFC 2822 date: an optional weekday, then day, month name, year ("Mon, 01 Jan 2024", "1 Jan 2024").
_RFC_2822 = re.compile(r"(?:[A-Za-z]{3},\s*)?\d{1,2}\s+[A-Za-z]{3}\s+\d{2,4}\b")
#: An RFC 3339 time in a leap second: the minute, second 60 with any fraction, the zone.
_LEAP_SECOND = re.compile(r"(?P<minute>\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d):60(?:\.\d+)?(?P<zone>[Zz]|[+-]\d\d:\d\d)?$")


class Article(BaseModel):
    """An input event on the ``articles`` topic. Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    id: ArticleId
    text: str
    title: str | None = None
    source: str | None = None
    url: str | None = None
    language: str | None = None
    published_at: Annotated[datetime | None, Field(strict=False)] = None
    label: str | None = None  # never used for learning

    @field_validator("published_at", mode="before")
    @classmethod
    def _read_time(cls, v: object) -> object:
        """What a news feed writes for a time, beyond RFC 3339's common form: an empty string is no time, a leap
        second (``23:59:60``, which RFC 3339 allows and :class:`datetime` cannot hold) is the last microsecond of
        its minute, and an RFC 2822 date (``Mon, 01 Jan 2024 10:00:00 GMT``, as RSS writes it) is read by the
        standard library's e-mail date parser. Anything else is pydantic's to read or refuse (a JSON number is
        Unix time: seconds, or milliseconds above 2e10)."""
        if not isinstance(v, str):
            return v
        text = v.strip()
        if not text:
            return None
        if leap := _LEAP_SECOND.match(text):
            return f"{leap['minute']}:59.999999{leap['zone'] or ''}"
        if _RFC_2822.match(text):
            try:
                return parsedate_to_datetime(text)
            except (TypeError, ValueError):
                pass  # pydantic names what is wrong
        return text

    @field_validator("published_at")
    @classmethod
    def _utc_if_no_zone(cls, v: datetime | None) -> datetime | None:
        """A time without a zone (or a bare date) is read as UTC, so the outputs that copy it carry an RFC 3339
        time, as the README promises (before, ``2024-01-01T10:00:00`` went out without an offset)."""
        return v.replace(tzinfo=timezone.utc) if v is not None and v.tzinfo is None else v

    @model_validator(mode="after")
    def _not_empty(self) -> Article:
        if not self.text.strip() and not (self.title or "").strip():  # white space alone is empty too
            raise ValueError("text may be empty only when title is not")
        return self

    def content(self) -> str:
        """Title and text, the string the tokenizer sees."""
        return f"{self.title}\n{self.text}" if self.title else self.text


class ModelRef(BaseModel):
    algorithm: str
    version: int
    topics: int


class TopicWeight(BaseModel):
    topic: int = Field(description="Stable topic id (never reused; see docs/topic-hygiene.md)")
    weight: float
    label: str = Field(description="The topic's three top words")
    slot: int | None = Field(None, description="Index of the topic in `mixture`, when it differs from `topic`")
    name: str | None = Field(None, description="The name given with `topicstream label`, if any")


class TopicEvent(BaseModel):
    """An output event on the ``article-topics`` topic (key = article id)."""

    id: str
    model: ModelRef
    mixture: list[float]
    top_topics: list[TopicWeight]
    published_at: datetime | None = None
    processed_at: datetime
    title: str | None = None
    url: str | None = None
    tokens: int = Field(0, description="In-vocabulary tokens the mixture was computed from")


@dataclass(frozen=True)
class Rejection:
    """Why a message went to the dead-letter topic."""

    reason: str  # one of REJECTION_REASONS
    detail: str


#: Every ``Rejection.reason`` :func:`decode_article` returns (the metrics start each at 0; README, "Events").
REJECTION_REASONS = ("invalid", "oversize", "not_utf8", "not_json", "not_object")

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, ignored at the start of a value


def decode_article(value: bytes | None, max_bytes: int) -> Article | Rejection:
    """Decode and validate one message value; never raises.

    Parsing is pydantic's own JSON parser (``Article.model_validate_json``), not :mod:`json`: it has a nesting
    limit (the standard library raises ``RecursionError`` on 10,000-deep arrays, which once crashed the learner on
    every restart), rejects lone UTF-16 surrogates (which no JSON encoder could write back out) and is about three
    times faster. A leading UTF-8 byte-order mark is ignored (RFC 8259 allows a parser to).
    """
    if value is None:
        return Rejection("invalid", "message has no value (tombstone)")
    if len(value) > max_bytes:
        return Rejection("oversize", f"message is {len(value)} bytes, the limit is {max_bytes}")
    if value.startswith(BOM):
        value = value[len(BOM) :]
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as e:
        return Rejection("not_utf8", f"not UTF-8: {e}")
    try:
        return Article.model_validate_json(value)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        first = errors[0] if errors else {"type": "", "loc": (), "msg": str(e)}
        if first["type"] == "json_invalid":
            return Rejection("not_json", f"not JSON: {first['msg']}")
        if first["type"] == "model_type" and not first["loc"]:
            return Rejection("not_object", f"expected a JSON object: {first['msg']}")
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'article'}: {err['msg']}" for err in errors)
        return Rejection("invalid", problems)
