"""``topicstream produce``: put articles into Kafka from a JSONL(.gz) file, standard input, or the generator.

Lines are forwarded as they are (the learner validates and dead-letters); the key is the article's ``id`` when
the line is a JSON object that has one. Each line is also judged here as the learner will judge it, so that the
command can say how many will be dead-lettered, and why the first ones will. A rate limit paces the stream like
a live wire.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pydantic_core
from confluent_kafka import KafkaException

from .kafka import KEEP_FAILURES, DeliveryTracker, flush_all, make_producer
from .schemas import BOM, Article, Rejection, decode_article
from .settings import Settings

__all__ = ["Tally", "iter_lines", "produce_lines"]

log = logging.getLogger(__name__)

#: The first two bytes of every gzip file (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"


def iter_lines(path: str | Path) -> Iterator[bytes]:
    """Every line of a JSONL file without its line end, blank ones included so that line numbers stay those of the
    file (gzip is decompressed, known by its magic bytes whatever the file is called); ``-`` reads standard
    input (a live feed)."""
    if str(path) == "-":
        stream: io.BufferedIOBase | gzip.GzipFile = sys.stdin.buffer  # type: ignore[assignment]
        for line in stream:
            yield line.rstrip(b"\r\n")
        return
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file: {p}")
    with open(p, "rb") as raw:
        zipped = raw.read(2) == GZIP_MAGIC
    with gzip.open(p, "rb") if zipped else open(p, "rb") as f:
        for line in f:
            yield line.rstrip(b"\r\n")


def generated_lines(n: int | None, seed: int) -> Iterator[bytes]:
    """Synthetic articles from :mod:`service.dev.generator` as JSON lines."""
    from .dev.generator import generate_articles

    for article in generate_articles(n, seed=seed):
        yield json.dumps(article).encode()


def _key_of(line: bytes) -> bytes | None:
    """The article id of a JSON line, as the learner will read it (its parser: a depth limit, no lone
    surrogates), for the message key; None when it has none. Never raises: the learner judges the line."""
    try:
        obj = pydantic_core.from_json(line.removeprefix(BOM))
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get("id"), str):
        return obj["id"].encode()
    return None


@dataclass
class Tally:
    """What a run of :func:`produce_lines` did, also when it stopped early (a truncated file, Ctrl-C): the lines
    read, the messages the broker acknowledged, the lines the producer refused (how many, and the first few
    line numbers: a live feed may never end), and the lines sent that are no valid article (the learner
    dead-letters them; how many, and the first few with the reason)."""

    lines: int = 0
    acked: int = 0
    skipped: int = 0
    first: list[int] = field(default_factory=list)
    invalid: int = 0
    first_invalid: list[tuple[int, Rejection]] = field(default_factory=list)

    def skip(self, line: int) -> None:
        self.skipped += 1
        if len(self.first) < KEEP_FAILURES:
            self.first.append(line)

    def reasons(self, n: int = 3) -> str:
        """Why the first ``n`` invalid lines are: "line 1: not_json: ...; line 2: invalid: ..."."""
        return "; ".join(f"line {line}: {r.reason}: {r.detail[:160]}" for line, r in self.first_invalid[:n])

    def sent(self, line: int, verdict: Article | Rejection) -> None:
        """A line sent, as the learner will judge it (:func:`service.schemas.decode_article`)."""
        if isinstance(verdict, Rejection):
            self.invalid += 1
            if len(self.first_invalid) < 3:
                self.first_invalid.append((line, verdict))


def produce_lines(
    settings: Settings,
    lines: Iterable[bytes],
    rate: float = 0.0,
    limit: int | None = None,
    topic: str | None = None,
    tally: Tally | None = None,
) -> int:
    """Send the non-blank ``lines`` to the input topic at most ``rate`` per second (0 = as fast as possible).

    Returns the number of messages acknowledged by the broker; raises if any was not. A line the producer refuses
    outright (larger than the broker takes) cannot enter the stream: it is skipped with a warning that names its
    line number, and counted in ``tally`` (the rest of the file is sent). When reading stops early (a truncated
    file, Ctrl-C), what was sent is still delivered (at most 30 s more) and counted in ``tally`` before the error
    goes on.
    """
    producer = make_producer(settings)
    tracker = DeliveryTracker()
    tally = tally if tally is not None else Tally()
    topic = topic or settings.input_topic
    start = time.monotonic()
    sent = 0
    try:
        for number, line in enumerate(lines, start=1):
            tally.lines = number
            if not line.strip():
                continue
            if limit is not None and sent >= limit:
                break
            if rate > 0:
                ahead = sent / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            sent += 1
            verdict = decode_article(line, settings.max_article_bytes)
            key = verdict.id.encode() if isinstance(verdict, Article) else _key_of(line)  # one parse a good line
            while True:
                try:
                    producer.produce(topic, value=line, key=key, on_delivery=tracker.callback)
                    tracker.sent()
                    tally.sent(number, verdict)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as e:
                    log.warning("line %d (%d bytes) not sent: %s", number, len(line), e)
                    tally.skip(number)
                    break
            producer.poll(0)
    except BaseException:
        producer.flush(30.0)  # what was sent before stays sent
        tally.acked = tracker.acked
        raise
    flush_all(producer)
    tally.acked = tracker.acked
    tracker.raise_on_failure()
    return tracker.acked
