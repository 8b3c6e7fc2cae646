"""``topicstream subscribe``: read the output topic and pick the articles of some topics, chosen by id or by words.

**No consumer group.** A subscriber wants every partition and keeps no offsets, so it *assigns* itself the
partitions instead of joining a group: it starts reading at once (a group join costs a rebalance on Kafka and up
to ``max.poll.interval.ms`` on the local broker), and it is the same thing on real Kafka. Partitions added later
are picked up from their beginning (metadata is re-read every ``refresh_s``; every 2 s while the topic does not
exist yet).

**Where it starts.** ``from_beginning`` reads each partition from its first output. Otherwise it starts *now*:
at the first offset whose timestamp is at least the start time (a ListOffsets lookup by time; "none yet" means
the partition's end). The local broker (Tansu) answers that lookup with offset 0 when no output is newer, so
until a partition yields its first output stamped at or after the start time, older ones are skipped; on Kafka
the offset found is that output, so the guard is a no-op there.

**Words.** :class:`TopicChoice` resolves words to topics (:func:`service.follow.resolve`) against the newest
summary in Redis and re-resolves whenever a new snapshot version appears, so the subscription follows the
topics its words mean as the model moves.

**Ids.** A topic id never changes meaning, but topic hygiene may merge it into another or retire it
(:mod:`service.lineage`). Whenever a new snapshot version appears, :class:`TopicChoice` reads the lineage events in
Redis (``P:lineage``) and follows a merged-away id to the id that carries it now, telling its ``on_moved``
callback (``topicstream subscribe`` prints a line); a retired id, or one whose slot now holds another topic under a
fresh id (:meth:`service.lineage.Lineage.renew`), is dropped with a notice, so nobody waits on it in silence.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Message, TopicPartition

from .follow import Match, resolve
from .kafka import make_consumer
from .lineage import LineageEvent, LineageStore, endings, follow
from .names import TopicNames
from .settings import Settings
from .snapshot import SnapshotStore

log = logging.getLogger(__name__)

__all__ = ["OutputReader", "TopicChoice", "matching_articles", "move_notice"]


class OutputReader:
    """Messages of one topic from every partition, without a consumer group (see the module docstring)."""

    def __init__(self, settings: Settings, topic: str, from_beginning: bool, refresh_s: float = 30.0) -> None:
        self.topic = topic
        self.refresh_s = refresh_s
        self.consumer: Consumer = make_consumer(settings, f"topicstream-subscribe-{uuid.uuid4().hex[:8]}")
        self.start_ms = int(time.time() * 1000)
        self.from_beginning = from_beginning
        self.assigned: set[int] = set()
        self._guarded: set[int] = set()  # partitions still skipping outputs older than start_ms
        self._next_refresh = 0.0

    def _partitions(self) -> set[int]:
        meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if meta is None or meta.error is not None:
            return set()
        return set(meta.partitions)

    def _refresh(self) -> None:
        # Until the topic exists (the learner creates it), look again every 2 s rather than every refresh_s.
        self._next_refresh = time.monotonic() + (self.refresh_s if self.assigned else min(2.0, self.refresh_s))
        new = sorted(self._partitions() - self.assigned)
        if not new:
            return
        first = not self.assigned
        if self.from_beginning or not first:
            tps = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in new]
        else:
            found = self.consumer.offsets_for_times([TopicPartition(self.topic, p, self.start_ms) for p in new], 10)
            tps = []
            for tp in found:
                if tp.offset >= 0:
                    self._guarded.add(tp.partition)
                tps.append(TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END))
        self.consumer.incremental_assign(tps)
        self.assigned.update(new)

    def poll(self, timeout: float = 0.5) -> Message | None:
        """The next message (None on a quiet ``timeout``)."""
        if time.monotonic() >= self._next_refresh:
            self._refresh()
        msg = self.consumer.poll(timeout)
        if msg is None or msg.error() is not None:
            return None
        p = msg.partition()
        if p in self._guarded:
            _, ts = msg.timestamp()
            if ts < self.start_ms:
                return None
            self._guarded.discard(p)
        return msg

    def close(self) -> None:
        self.consumer.close()


@dataclass
class TopicChoice:
    """The topics followed: fixed ids, or the topics that ``words`` mean in the newest summary."""

    store: SnapshotStore
    names: TopicNames | None = None
    words: str | None = None
    fixed: frozenset[int] = frozenset()
    max_topics: int = 3
    on_change: Callable[[list[Match], dict[str, Any]], None] | None = None
    #: Where merges and retirements of followed ids are read (ids only): None follows the ids as given.
    lineage: LineageStore | None = None
    #: Told the events that moved followed ids (a merge: now following its ``into``; a retirement: dropped).
    on_moved: Callable[[list[LineageEvent]], None] | None = None
    recheck_s: float = 2.0
    topics: frozenset[int] = frozenset()
    matches: list[Match] = field(default_factory=list)
    version: int | None = None
    _lineage_head: list[LineageEvent] = field(default_factory=list)  # the newest lineage event read
    _next_check: float = 0.0
    _resolved: bool = False

    def __post_init__(self) -> None:
        if self.words is None:
            self.topics = self.fixed

    def update(self, now: float | None = None) -> bool:
        """If a new snapshot appeared since the last call (looked for at most every ``recheck_s``): re-resolve the
        words, or follow the fixed ids through the lineage (:meth:`_follow_ids`). True when the followed topics
        changed."""
        now = time.monotonic() if now is None else now
        if now < self._next_check or (self.words is None and self.lineage is None):
            return False
        self._next_check = now + self.recheck_s
        if self.words is None:
            return self._follow_ids()
        try:
            latest = self.store.latest_version()
            if latest is None or latest == self.version:
                return False
            summary = self.store.summary()
            if summary is None or summary.get("version") == self.version:
                return False
            names = self.names.all() if self.names is not None else {}
        except redis.RedisError as e:  # a Redis blip: keep following the topics resolved so far
            log.warning(
                "cannot read the newest summary (%s: %s); following topics %s meanwhile",
                type(e).__name__,
                e,
                sorted(self.topics),
            )
            return False
        self.version = summary.get("version")
        matches = resolve(summary, self.words, names, max_topics=self.max_topics)
        topics = frozenset(m.topic for m in matches)
        changed = topics != self.topics or not self._resolved
        self.matches, self.topics, self._resolved = matches, topics, True
        if changed and self.on_change is not None:
            self.on_change(matches, summary)
        return changed

    def _follow_ids(self) -> bool:
        """Follow the fixed ids through the merges and retirements announced in ``P:lineage`` (chains too: a
        merged into b, b into c), when a new snapshot version or a new lineage event appeared (the learner pushes
        a snapshot's events just after the snapshot). ``fixed`` holds the ids followed now; ``topics``, the ids
        matched, keeps the ended ones too: outputs computed before a merge still carry the old id, and a subscriber
        behind the stream (or ``--from-beginning``) wants them. True when the followed ids changed."""
        assert self.lineage is not None
        try:
            latest = self.store.latest_version()
            head = self.lineage.recent(1)
            if latest is None or (latest == self.version and head == self._lineage_head):
                return False
            events = self.lineage.recent()
        except redis.RedisError as e:
            log.warning(
                "cannot read the topic lineage (%s: %s); following %s meanwhile",
                type(e).__name__,
                e,
                sorted(self.fixed),
            )
            return False
        self.version, self._lineage_head = latest, head
        ended = endings(events)
        moved: list[LineageEvent] = []
        live: set[int] = set()
        for topic in self.fixed:
            path, now = follow(topic, ended)
            moved += path
            if now is not None:
                live.add(now)
        if not moved:
            return False
        self.fixed = frozenset(live)
        self.topics = self.topics | self.fixed
        if self.on_moved is not None:
            self.on_moved(moved)
        return True


def move_notice(e: LineageEvent) -> str:
    """What ``topicstream subscribe`` tells a subscriber when lineage event ``e`` moved an id it follows."""
    if e.kind == "merge":
        return f"topic {e.topic} was merged into topic {e.into} (snapshot v{e.version}): following {e.into}"
    if e.kind == "retire":
        return f"topic {e.topic} was retired (snapshot v{e.version}): no new article will carry it"
    return (
        f"topic {e.parent} faded and its slot holds a new topic, {e.topic} (snapshot v{e.version}): "
        f"no new article will carry {e.parent}"
    )


def _tags(msg: Message) -> set[int]:
    from .pipeline import H_TOPICS

    raw = dict(msg.headers() or []).get(H_TOPICS) or b""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return {int(t) for t in text.split(",") if t.strip().isdigit()}


def matching_articles(
    reader: OutputReader, choice: TopicChoice, min_weight: float = 0.0
) -> Iterator[dict[str, Any] | None]:
    """Endless: one dict (id, title, topic, weight, model version) per output tagged with a followed topic whose
    weight is at least ``min_weight``, and None after each quiet poll (so the caller can check for a stop).

    Topics are stable ids, and an output's ``mixture`` is indexed by slot, which differs from the id once topic
    hygiene has moved a topic: the weight is read from the output's ``top_topics`` (id and weight), the entries
    its ``topicstream-topics`` header lists."""
    while True:
        choice.update()
        msg = reader.poll(0.5)
        if msg is None:
            yield None
            continue
        hit = _tags(msg) & choice.topics
        if not hit:
            continue
        event = json.loads(msg.value() or b"{}")
        weights = {int(t["topic"]): float(t["weight"]) for t in event.get("top_topics") or []}
        topic = max(hit, key=lambda k: weights.get(k, 0.0))
        weight = weights.get(topic, 0.0)
        if weight < min_weight:
            continue
        yield {
            "id": event["id"],
            "title": event.get("title"),
            "topic": topic,
            "weight": weight,
            "model_version": event["model"]["version"],
        }
