"""``topicstream subscribe``: read the output topic and pick the articles of some topics, chosen by id or by words.

**No consumer group.** A subscriber wants every partition and keeps no offsets, so it *assigns* itself the
partitions instead of joining a group: it starts reading at once (a group join costs a rebalance on Kafka and up
to ``max.poll.interval.ms`` on the local broker), and it is the same thing on real Kafka. Partitions added later
are picked up from their beginning (metadata is re-read every ``refresh_s``; every 2 s while the topic does not
exist yet).

**Where it starts.** ``from_beginning`` reads each partition from its first output. Otherwise it starts *now*
(or at ``start_ms``: ``topicstream subscribe --since 15m`` resumes a subscription that was away):
at the first offset whose timestamp is at least the start time (a ListOffsets lookup by time; "none yet" means
the partition's end). The local broker (Tansu) answers that lookup with offset 0 when no output is newer, so
until a partition yields its first output stamped at or after the start time, older ones are skipped; on Kafka
the offset found is that output, so the guard is a no-op there.

``after`` (``--after PARTITION:OFFSET``, from the ``partition`` and ``offset`` of the last line a program kept)
resumes those partitions exactly, with the output after that one; partitions it does not name start as above. An
offset the partition no longer holds (retention) or never held starts it from its oldest output (the consumer's
``auto.offset.reset``).

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
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import redis
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Message, TopicPartition

from .anchors import RENEW_WEIGHT
from .follow import Match, resolve
from .kafka import make_consumer
from .lineage import LineageEvent, LineageStore, endings, follow
from .names import TopicNames
from .pipeline import H_TOPICS, H_VERSION
from .settings import Settings
from .snapshot import SnapshotStore
from .tables import EMPTY

log = logging.getLogger(__name__)

__all__ = [
    "Fate",
    "OutputReader",
    "TopicChoice",
    "matching_articles",
    "move_notice",
    "parse_after",
    "topic_fate",
    "what_happened",
]


def parse_after(values: Iterable[str]) -> dict[int, int]:
    """``PARTITION:OFFSET`` strings (``--after``) as {partition: offset}; ValueError says which one is wrong."""
    out: dict[int, int] = {}
    for v in values:
        m = re.fullmatch(r"(\d+):(\d+)", v.strip())
        if m is None:
            raise ValueError(f"{v!r} is not PARTITION:OFFSET (two non-negative integers, e.g. 0:1234)")
        p, o = int(m[1]), int(m[2])
        if p in out and out[p] != o:
            raise ValueError(f"partition {p} is given twice ({out[p]} and {o})")
        out[p] = o
    return out


class OutputReader:
    """Messages of one topic from every partition, without a consumer group (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        from_beginning: bool,
        refresh_s: float = 30.0,
        start_ms: int | None = None,
        after: Mapping[int, int] | None = None,
    ) -> None:
        self.topic = topic
        #: Partitions resumed exactly: read from the offset after the one given.
        self.after = dict(after or {})
        self.refresh_s = refresh_s
        self.consumer: Consumer = make_consumer(settings, f"topicstream-subscribe-{uuid.uuid4().hex[:8]}")
        #: Outputs written from this time on (Unix ms: now, unless given) are read, unless ``from_beginning``.
        self.start_ms = int(time.time() * 1000) if start_ms is None else start_ms
        self.from_beginning = from_beginning
        self.assigned: set[int] = set()
        self._guarded: set[int] = set()  # partitions still skipping outputs older than start_ms
        self._next_refresh = 0.0

    def _partitions(self) -> set[int]:
        meta = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if meta is None or meta.error is not None:
            return set()
        return set(meta.partitions)

    def check(self) -> str:
        """What a person subscribing should be told at the start: that the topic does not exist yet (the learner
        creates it; the reader waits for it), or nothing. Raises ValueError for a resumed partition the topic
        does not have (it would wait for ever)."""
        partitions = self._partitions()
        if not partitions:
            return f"topic {self.topic!r} does not exist yet (the learner creates it); waiting for it"
        unknown = sorted(set(self.after) - partitions)
        if unknown:
            have = f"0–{max(partitions)}" if len(partitions) > 1 else "only partition 0"
            raise ValueError(f"{self.topic!r} has no partition {unknown[0]} ({have})")
        return ""

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
        for tp in tps:
            if tp.partition in self.after:
                tp.offset = self.after[tp.partition] + 1
                self._guarded.discard(tp.partition)
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
    #: The snapshot version by which every id followed had ended (None while one lives, and for words).
    ended_at: int | None = None
    _caught_up: int = 0  # the newest version :meth:`catch_up` updated for
    _splits_told: set[tuple[int | None, int]] = field(default_factory=set)  # (parent, new id) of splits told on_moved
    _next_check: float = 0.0
    _resolved: bool = False
    #: The words' earlier choices, (summary version, topics), oldest first: outputs computed before the newest
    #: choice's snapshot are matched with the choice of theirs (:meth:`topics_for`).
    _choices: list[tuple[int, frozenset[int]]] = field(default_factory=list)
    #: The snapshot version from which a followed id carries a fixed one (a merge's ``into``: its version); the
    #: ids asked for are matched on every output.
    _since: dict[int, int] = field(default_factory=dict)
    _asked: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.words is None:
            self.topics = self._asked = self.fixed

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
        if changed and isinstance(self.version, int):
            self._choices = [*self._choices[-(KEEP_CHOICES - 1) :], (self.version, topics)]
        if changed and self.on_change is not None:
            self.on_change(matches, summary)
        return changed

    def topics_for(self, version: int | None) -> frozenset[int]:
        """The topics an output computed by snapshot ``version`` is matched on: the ids followed (the ended ones
        too, :meth:`_follow_ids`) that carried a fixed one by then (an id merged into gives its outputs from the
        merge's snapshot on, not its own articles from before), or for words the choice made on the newest summary
        not newer than ``version``. Words that moved to another topic (a duplicate of theirs, say, before a merge)
        dropped the outputs of the earlier one still on their way (measured: 5 of 1,605)."""
        if version is None:
            return self.topics
        if self.words is None:
            return frozenset(t for t in self.topics if self._since.get(t, 0) <= version)
        if not self._choices or version >= self._choices[-1][0]:
            return self.topics
        earlier = [topics for made_on, topics in self._choices if made_on <= version]
        return earlier[-1] if earlier else self._choices[0][1]

    def _follow_ids(self) -> bool:
        """Follow the fixed ids through the merges and retirements announced in ``P:lineage`` (chains too: a
        merged into b, b into c), when a new snapshot version or a new lineage event appeared (the learner pushes
        a snapshot's events just after the snapshot). ``fixed`` holds the ids followed now; ``topics``, the ids
        matched, keeps the ended ones too, and every id that carried one on the way (from its merge's snapshot on,
        :meth:`topics_for`): outputs computed before a merge still carry the old id, and a subscriber behind the
        stream (or ``--from-beginning``) wants them. True when the followed ids changed."""
        assert self.lineage is not None
        try:
            latest = self.store.latest_version()
            head = self.lineage.recent(1)
            if latest is None or (latest == self.version and head == self._lineage_head):
                return False
            events = self.lineage.known(self.fixed)
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
        carried: set[int] = set()  # every id that carried a followed one, also one that ended since
        for topic in self.fixed:
            path, now = follow(topic, ended)
            moved += path
            if now is not None:
                live.add(now)
            for step in path:
                if step.kind == "merge" and step.into is not None:
                    carried.add(step.into)
                    if step.into not in self._asked:
                        self._since.setdefault(step.into, step.version)
        # A split keeps the id followed (it holds one half) and gives the other half a new id, which is a topic
        # of its own: not followed, but told once (events oldest first, as they happened).
        splits = [
            e
            for e in reversed(events)
            if e.kind == "split" and e.parent in live and (e.parent, e.topic) not in self._splits_told
        ]
        self._splits_told.update((e.parent, e.topic) for e in splits)
        if moved:
            self.fixed = frozenset(live)
            self.topics = self.topics | self.fixed | carried
            if not live:  # every id followed ended: outputs of this version on carry none of them
                self.ended_at = max(e.version for e in moved)
        if self.on_moved is not None and (moved or splits):
            self.on_moved(moved + splits)
        return bool(moved)

    def catch_up(self, version: int) -> bool:
        """An output computed by snapshot ``version`` arrived: if that is newer than the one the choice was made
        on, update now rather than at the next ``recheck_s`` (the learner writes a snapshot and its lineage before
        any output carries its version, so a merge is known before the first output tagged with the new id)."""
        if version <= max(self.version or 0, self._caught_up):
            return False
        self._caught_up = version  # once per version, whatever Redis answers
        self._next_check = 0.0
        return self.update()


def what_happened(e: LineageEvent) -> str:
    """Lineage event ``e`` for a person: ``topic 12 was merged into topic 7 (snapshot v34)``."""
    if e.kind == "merge":
        return f"topic {e.topic} was merged into topic {e.into} (snapshot v{e.version})"
    if e.kind == "retire":
        return f"topic {e.topic} was retired (snapshot v{e.version})"
    if e.kind == "split":
        return f"topic {e.parent} was split (snapshot v{e.version}): part of it is now topic {e.topic}"
    return f"topic {e.parent} faded and its slot holds a new topic, {e.topic} (snapshot v{e.version})"


def move_notice(e: LineageEvent) -> str:
    """What ``topicstream subscribe`` tells a subscriber when lineage event ``e`` moved an id it follows: what
    happened, then what the subscription does about it."""
    then = {
        "merge": f": following {e.into}",
        "retire": ": no new article will carry it",
        "split": f"; still following {e.parent} (subscribe to {e.topic} for the other part)",
    }
    return what_happened(e) + then.get(e.kind, f": no new article will carry {e.parent}")


class Fate(NamedTuple):
    """What became of a topic id (:func:`topic_fate`)."""

    now: int | None  # the id that carries it now; None: it ended without a successor, or never was a topic
    ended: bool  # the lineage says it ended (merged, retired, its slot retaken)
    why: str  # for a person, when ``now`` is not the id itself
    #: For a person, when the topic that carries it is empty (prevalence under ``service.tables.EMPTY``, a slot that
    #: ``topicstream topics`` leaves out): a slot that a merge or retirement emptied, under its fresh id, may take
    #: long to fill; or the background topic, which no output lists among its top topics.
    empty: str = ""


def topic_fate(topic: int, summary: dict[str, Any] | None, events: list[LineageEvent]) -> Fate:
    """What became of id ``topic``, by the newest snapshot's ``summary`` and the lineage ``events`` (newest
    first, as :meth:`LineageStore.recent` gives them). Itself while it is a topic of the snapshot (or no snapshot
    exists yet: the first holds ids 0…K−1); an id that was never a topic (or whose end fell out of the events
    kept) has neither a successor nor an end. ``empty`` says when the topic that carries it is nearly empty."""
    if summary is None:
        return Fate(topic, False, "")
    path: list[LineageEvent] = []
    now: int | None = topic
    if not any(t["topic"] == topic for t in summary["topics"]):
        path, now = follow(topic, endings(events))
        if not path:
            return Fate(None, False, f"snapshot v{summary['version']} has no topic {topic}")
    held = next((t for t in summary["topics"] if t["topic"] == now), None)
    empty = ""
    if held is not None and held.get("background"):
        empty = (
            f"topic {now} is the background topic (the words every article uses): outputs keep its weight in their "
            "mixture but never list it among their top topics, so no article will be tagged with it"
        )
    elif held is not None and held["prevalence"] < EMPTY:
        empty = (
            f"topic {now} holds next to no articles (prevalence {held['prevalence']:.4f} in snapshot "
            f"v{summary['version']}): it may be long before an article is tagged with it"
        )
    elif held is not None and held["prevalence"] < RENEW_WEIGHT:
        empty = (
            f"topic {now} weighs under 1 % (prevalence {held['prevalence']:.4f} in snapshot v{summary['version']}): "
            "it names no topic yet, and may still change without a lineage event"
        )
    return Fate(now, bool(path), "; ".join(what_happened(e) for e in path), empty)


def _version_and_tags(msg: Message) -> tuple[int | None, set[int]]:
    """The snapshot version an output names (``topicstream-model-version``; None without one) and the topic ids
    it is tagged with (``topicstream-topics``), from one read of its headers."""
    raw: dict[str, Any] = dict(msg.headers() or [])
    headers = {k: v.decode() if isinstance(v, bytes) else str(v or "") for k, v in raw.items()}
    version = headers.get(H_VERSION, "").strip()
    tags = {int(t) for t in headers.get(H_TOPICS, "").split(",") if t.strip().isdigit()}
    return (int(version) if version.isdigit() else None), tags


#: Earlier choices of a subscription's words kept for the outputs still on their way (:meth:`TopicChoice.topics_for`).
KEEP_CHOICES = 16
#: Article ids a subscription remembers to print an article once (a learner that restarts from its snapshot
#: publishes the outputs since then again).
DEDUPE_KEEP = 10_000
#: Quiet polls (0.5 s each) in a row after which a subscription whose ids all ended has read what carried them.
ENDED_QUIET_POLLS = 4


def matching_articles(
    reader: OutputReader, choice: TopicChoice, min_weight: float = 0.0, stop: threading.Event | None = None
) -> Iterator[dict[str, Any] | None]:
    """One dict per output tagged with a followed topic whose weight is at least ``min_weight`` (the article's
    id, title, url, published_at, the topic and its weight, the model version, processed_at, and where the output
    lies: partition, offset), and None after each quiet poll; until ``stop`` is set (checked after every output
    read, so a subscriber to a rare topic on a busy stream stops at once), or every id followed has ended
    (``choice.ended_at``) and the reader has caught up with the outputs that may still carry one: 2 s without an
    output (:data:`ENDED_QUIET_POLLS`), or an output of that version or newer from every partition. An article
    already given among the last :data:`DEDUPE_KEEP` is not given again (a restarted learner republishes what it
    learned after its last snapshot).

    Topics are stable ids, and an output's ``mixture`` is indexed by slot, which differs from the id once topic
    hygiene has moved a topic: the weight is read from the output's ``top_topics`` (id and weight), the entries
    its ``topicstream-topics`` header lists."""
    given: OrderedDict[str, None] = OrderedDict()
    newest: dict[int, int] = {}  # partition → the newest version read there
    quiet = 0  # polls in a row that read nothing
    while stop is None or not stop.is_set():
        choice.update()
        msg = reader.poll(0.5)
        end = choice.ended_at
        if msg is None:
            quiet += 1
            if end is not None and quiet >= ENDED_QUIET_POLLS:
                return
            yield None
            continue
        quiet = 0
        (version, tags), partition = _version_and_tags(msg), msg.partition() or 0
        if version is not None:
            newest[partition] = max(version, newest.get(partition, 0))
            choice.catch_up(version)
            if end is not None and all(newest.get(p, -1) >= end for p in reader.assigned):
                return
        hit = tags & choice.topics_for(version)
        if not hit:
            continue
        event = json.loads(msg.value() or b"{}")
        weights = {int(t["topic"]): float(t["weight"]) for t in event.get("top_topics") or []}
        topic = max(hit, key=lambda k: weights.get(k, 0.0))
        weight = weights.get(topic, 0.0)
        if weight < min_weight or event["id"] in given:
            continue
        given[event["id"]] = None
        if len(given) > DEDUPE_KEEP:
            given.popitem(last=False)
        yield {
            "id": event["id"],
            "title": event.get("title"),
            "url": event.get("url"),
            "published_at": event.get("published_at"),
            "topic": topic,
            "weight": weight,
            "model_version": event["model"]["version"],
            "processed_at": event.get("processed_at"),
            "partition": partition,
            "offset": msg.offset(),
        }
