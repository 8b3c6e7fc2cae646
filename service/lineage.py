"""Topic lineage: an id for life for every topic, and the history of births, merges, splits and retirements.

A kernel's topics are *slots* (column k of its statistics). Topic hygiene (:mod:`kernels.hygiene`) merges a slot
into another, retires it, splits it in two (the new half in a freed slot), or re-seeds a freed slot with a new
topic, so a slot number alone does not say what a topic means over time. :class:`Lineage` gives each meaning its
own **topic id**: at start slot k carries id k; whenever a slot is freed (merged away or retired) it gets a fresh
id that was never used before, and a birth gets a fresh id too. An id therefore never changes meaning and is never
reused, also across a crash while Redis was down (:meth:`Lineage.reserve`); a merged-away id points to the id that
now carries its words (:meth:`Lineage.successor`). A split topic keeps its id and the larger half of its words (a
narrower meaning than the muddle it was); the other half gets a fresh id in a freed slot, and its event names the id
it came from (``parent``). An id that never weighed enough to be seen (:meth:`Lineage.record`'s ``seen``) is no
topic yet: when a move ends it, its slot keeps it and no event is told (the online HDP deletes and merges a few such
slivers every hygiene round, whose events filled the bounded history), until a birth or split gives that slot a new
topic: then the id's retirement is told (:attr:`Lineage.quiet`), as is that of a seen id whose slot the kernel's
own learning emptied.

:class:`LineageStore` keeps the events in Redis as a bounded list, newest first (``P:lineage``, ``LPUSH`` +
``LTRIM``), with counts by kind (hash ``P:lineage:counts``) for dashboards, and the event that ended each id
(hash ``P:lineage:endings``, for :data:`MAX_ENDINGS` ids), so that an id whose end the list has dropped is
still followed (:meth:`LineageStore.known`). :func:`render_lineage` formats them
for ``topicstream topics``. The :class:`Lineage` mapping itself belongs in the snapshot payload
(``state_dict`` / ``from_state``), so that it is restored together with the model it describes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

import redis

from kernels.hygiene import Event

__all__ = [
    "H_INTO",
    "H_LINEAGE_KIND",
    "Lineage",
    "LineageEvent",
    "LineageStore",
    "describe_event",
    "endings",
    "follow",
    "moved_slots",
    "render_lineage",
    "stamp",
]

#: Headers of a lineage event on the Kafka lineage topic (beside the outputs' topicstream-topics and
#: topicstream-model-version): its kind, and for a merge the id that carries the topic now.
H_LINEAGE_KIND = "topicstream-lineage-kind"
H_INTO = "topicstream-into"

#: Ids whose ending event ``P:lineage:endings`` keeps (the oldest dropped past it, with some slack).
MAX_ENDINGS = 10_000
#: Events kept in ``P:lineage`` by default.
DEFAULT_KEEP = 1000
#: Merged-away ids whose successor is remembered (the oldest are forgotten: memory stays bounded for ever).
MAX_MERGED = 10_000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LineageEvent:
    """One move in stable ids.

    ``kind``: birth | merge | split | retire. ``topic``: the id born (for a split: the new half's), merged away
    or retired; ``slot``: the kernel slot it concerned; ``into``: for a merge, the id that now carries ``topic``;
    ``score``: the move's score (see :class:`kernels.hygiene.Event`); ``version``: the snapshot version the move
    is part of; ``time``: Unix seconds; ``parent``: for a split, the id that was split (it keeps the other half);
    for a birth without a move, the id the slot's topic had before (:meth:`Lineage.catch_up`).
    """

    kind: str
    topic: int
    slot: int
    into: int | None
    score: float
    version: int
    time: float
    parent: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    def kafka_record(self) -> tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]:
        """Key, value and headers of this event on the lineage topic. The key is the id it is about (the topic
        born, merged away, split off or retired); ``topicstream-topics`` names that id, and a ``parent`` too (the
        id split, or the id whose slot a birth took over: that id has ended), as outputs name their topics, so a
        consumer that filters outputs by that header for its topic can read this topic with the same filter."""
        from .pipeline import H_TOPICS, H_VERSION

        ids = [self.topic] if self.parent is None else [self.topic, self.parent]
        headers: list[tuple[str, str | bytes | None]] = [
            (H_TOPICS, ",".join(map(str, ids)).encode()),
            (H_VERSION, str(self.version).encode()),
            (H_LINEAGE_KIND, self.kind.encode()),
        ]
        if self.into is not None:
            headers.append((H_INTO, str(self.into).encode()))
        return str(self.topic).encode(), self.to_json().encode(), headers

    @classmethod
    def from_json(cls, raw: str | bytes) -> LineageEvent:
        d = json.loads(raw)
        into, parent = d.get("into"), d.get("parent")
        return cls(
            kind=str(d["kind"]),
            topic=int(d["topic"]),
            slot=int(d["slot"]),
            into=None if into is None else int(into),
            score=float(d["score"]),
            version=int(d["version"]),
            time=float(d["time"]),
            parent=None if parent is None else int(parent),
        )


class Lineage:
    """Slot ↔ id mapping and the merged-away ids' successors, for a kernel with ``n_slots`` topics."""

    def __init__(self, n_slots: int) -> None:
        if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
            raise ValueError(f"n_slots must be a positive integer, got {n_slots!r}")
        self.slot_ids: list[int] = list(range(n_slots))
        self.next_id = n_slots
        self.merged_into: dict[int, int] = {}
        #: Ids a move ended without an event (nobody saw them) that their slots kept: when a birth or split gives
        #: such a slot a new topic, the id's end is told then (a retirement), so that its subscribers hear of it.
        self.quiet: set[int] = set()

    def id_of(self, slot: int) -> int:
        """The id the topic in ``slot`` has now."""
        return self.slot_ids[slot]

    def slot_of(self, topic: int) -> int | None:
        """The slot that carries id ``topic`` now, or ``None`` if it was merged away or retired."""
        try:
            return self.slot_ids.index(topic)
        except ValueError:
            return None

    def successor(self, topic: int) -> int | None:
        """The live id that carries ``topic`` now: itself if live, the end of its merge chain if merged away,
        ``None`` if it (or the end of its chain) was retired or never existed."""
        seen = set()
        while topic in self.merged_into and topic not in seen:
            seen.add(topic)
            topic = self.merged_into[topic]
        return topic if topic in self.slot_ids else None

    def reserve(self) -> int:
        """How many ids may be given out beyond the ``next_id`` of the last snapshot written: 2·K for K slots. A
        plan's moves give each slot at most two (a merge or retirement frees it, then a split or birth fills it) and
        a renewal one to a slot no move touched, so one capture's ids always fit; a learner whose writes fail gives
        out no more once they are used up (:meth:`room`)."""
        return 2 * len(self.slot_ids)

    def room(self, durable: int) -> int:
        """How many ids may still be given out while the last snapshot written holds ``next_id`` = ``durable``."""
        return durable + self.reserve() - self.next_id

    def skip_reserve(self, writes: int = 1) -> None:
        """For a mapping restored from a snapshot: its learner may have given out up to :meth:`reserve` ids after
        the snapshot was written (its later writes failed, then it died), and outputs carried them; when
        ``writes`` − 1 newer snapshots were written but cannot be read, up to that many reserves more (each write
        holds at most one reserve beyond the one before; their merge and retirement events, which :meth:`catch_up`
        reads, do not name the fresh ids of the slots they freed). Skip them all, so that none of them is given to
        another topic. Ids stay unique, not consecutive."""
        self.next_id += max(1, writes) * self.reserve()

    def _fresh(self, slot: int) -> int:
        new = self.next_id
        self.next_id += 1
        self.slot_ids[slot] = new
        return new

    def _remember_merge(self, gone: int, into: int) -> None:
        """``gone`` now lives on in ``into``; the oldest merges are forgotten past :data:`MAX_MERGED`."""
        self.merged_into.pop(gone, None)  # re-inserted last: the dict's order is the merges' order
        self.merged_into[gone] = into
        while len(self.merged_into) > MAX_MERGED:
            del self.merged_into[next(iter(self.merged_into))]

    def catch_up(self, history: Sequence[LineageEvent], version: int) -> list[LineageEvent]:
        """Make this mapping, restored from snapshot ``version``, agree with ``history`` (``P:lineage``, newest
        first), which may hold events of later snapshots: the newest were unreadable and skipped, or they were
        written by a learner whose snapshots are gone. Ids those events gave out are never given out again, merges
        they announced are followed by :meth:`successor`, and a slot whose id they announced as merged away or
        retired gets a fresh id, so no announced-dead id labels a topic again. Returns a birth event (version 0,
        ``parent`` = the old id) for each such slot, to be stamped and pushed with the next snapshot."""
        given = [i for e in history for i in (e.topic, e.into, e.parent) if i is not None]
        self.next_id = max([self.next_id, *(i + 1 for i in given)])
        later = [e for e in reversed(history) if e.version > version]  # oldest first
        for e in later:
            if e.kind == "merge" and e.into is not None:
                self._remember_merge(e.topic, e.into)
        dead = endings(later)
        out = []
        for slot, topic in enumerate(self.slot_ids):
            if topic in dead:
                out.append(LineageEvent("birth", self._fresh(slot), slot, None, 0.0, 0, 0.0, parent=topic))
        return out

    def renew(self, slots: Iterable[int], scores: Sequence[float]) -> list[LineageEvent]:
        """Fresh ids for ``slots`` whose topic changed meaning without a move (the online HDP refills a slot that
        its own learning emptied; ``scores``: each slot's Hellinger drift since the last snapshot). Returns a birth
        event per slot (version 0, ``parent`` = the id the slot had), to be stamped with the snapshot."""
        out = []
        for k, score in zip(slots, scores, strict=True):
            old = self.slot_ids[k]
            out.append(LineageEvent("birth", self._fresh(k), k, None, float(score), 0, 0.0, parent=old))
        return out

    def record(
        self, events: Iterable[Event], version: int, at: float, seen: Container[int] | None = None
    ) -> list[LineageEvent]:
        """Apply hygiene ``events`` (slot ids, in the order they happened) and return them in stable ids. With
        ``seen`` (the ids that ever weighed enough to be shown), a merge or retirement of an id not in it is no
        event: that id never named a topic anyone saw, so its slot keeps it for whatever forms there. A birth or a
        split that gives a slot a new topic ends the id the slot had: if that id is in ``seen`` (and no move of
        these ``events`` gave it out), or a move kept it quietly, its retirement is told just before (the kernel's
        own learning may empty a slot, and hygiene retires no empty slot). Without ``seen``, every merge and
        retirement is told, and a birth or split tells nothing more."""
        out: list[LineageEvent] = []
        n = len(self.slot_ids)
        given: set[int] = set()  # ids these events gave out: nobody saw them, their end needs no event
        for e in events:
            slot = e.topics[0] if e.topics else -1
            if not all(0 <= t < n for t in e.topics) or not 0 <= slot < n or not 0 <= (e.into or 0) < n:
                raise ValueError(f"event {e} names a slot outside [0, {n})")
            if e.kind == "merge":
                if e.into is None:
                    raise ValueError(f"merge event without 'into': {e}")
                gone, into = self.slot_ids[slot], self.slot_ids[e.into]
                if seen is not None and gone not in seen:
                    self.quiet.add(gone)
                    continue
                self._remember_merge(gone, into)
                given.add(self._fresh(slot))
                out.append(LineageEvent("merge", gone, slot, into, e.score, version, at))
            elif e.kind == "retire":
                gone = self.slot_ids[slot]  # no longer in slot_ids: successor() says None
                if seen is not None and gone not in seen:
                    self.quiet.add(gone)
                    continue
                given.add(self._fresh(slot))
                out.append(LineageEvent("retire", gone, slot, None, e.score, version, at))
            elif e.kind == "split":
                if len(e.topics) != 2 or e.topics[0] == e.topics[1]:
                    raise ValueError(f"split event without (split slot, new slot): {e}")
                parent, new_slot = self.slot_ids[slot], e.topics[1]
                out += self._tell_end(new_slot, version, at, seen, given)
                born = self._fresh(new_slot)
                given.add(born)
                out.append(LineageEvent("split", born, new_slot, None, e.score, version, at, parent))
            else:  # birth: a new topic in a slot
                out += self._tell_end(slot, version, at, seen, given)
                born = self._fresh(slot)
                given.add(born)
                out.append(LineageEvent(e.kind, born, slot, e.into, e.score, version, at))
        self.quiet &= set(self.slot_ids)
        return out

    def _tell_end(
        self, slot: int, version: int, at: float, seen: Container[int] | None, given: Container[int]
    ) -> list[LineageEvent]:
        """The retirement of the id in ``slot``, now that the slot gets a new topic: told for an id kept after a
        quiet move, or one in ``seen`` that was not ``given`` out in the same :meth:`record`."""
        old = self.slot_ids[slot]
        if old not in self.quiet and (seen is None or old not in seen or old in given):
            return []
        self.quiet.discard(old)
        return [LineageEvent("retire", old, slot, None, 0.0, version, at)]

    def state_dict(self) -> dict[str, Any]:
        """JSON-compatible state for the snapshot payload."""
        return {
            "slot_ids": list(self.slot_ids),
            "next_id": self.next_id,
            "merged_into": [[a, b] for a, b in self.merged_into.items()],  # oldest first: the order of forgetting
            "quiet": sorted(self.quiet),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Lineage:
        slot_ids = [int(x) for x in state["slot_ids"]]
        lin = cls(len(slot_ids))
        lin.slot_ids = slot_ids
        lin.next_id = int(state["next_id"])
        lin.merged_into = {int(a): int(b) for a, b in state["merged_into"]}  # older states' "retired" is unused
        lin.quiet = {int(t) for t in state.get("quiet", [])} & set(slot_ids)  # older states have none
        if len(set(slot_ids)) != len(slot_ids) or (slot_ids and max(slot_ids) >= lin.next_id):
            raise ValueError("lineage state is inconsistent: slot ids repeat or exceed next_id")
        return lin


class LineageStore:
    """The bounded event history in Redis: list ``P:lineage`` (newest first), hash ``P:lineage:counts`` and hash
    ``P:lineage:endings`` (id → the event that ended it)."""

    def __init__(self, client: redis.Redis, prefix: str = "topicstream", keep: int = DEFAULT_KEEP) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer, got {keep!r}")
        self.client = client
        self.key = f"{prefix}:lineage"
        self.counts_key = f"{prefix}:lineage:counts"
        self.endings_key = f"{prefix}:lineage:endings"
        self.keep = keep

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> LineageStore:
        return cls(redis.Redis.from_url(url), **kwargs)

    def push(self, events: Sequence[LineageEvent]) -> None:
        """Append ``events`` (oldest first) atomically, trim to the newest ``keep``, count them by kind."""
        if not events:
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.lpush(self.key, *(e.to_json() for e in events))
        pipe.ltrim(self.key, 0, self.keep - 1)
        for e in events:
            pipe.hincrby(self.counts_key, e.kind, 1)
        for gone, e in endings(events).items():  # an id ends once: the first event that ended it stays
            pipe.hsetnx(self.endings_key, str(gone), e.to_json())
        pipe.hlen(self.endings_key)
        if pipe.execute()[-1] > MAX_ENDINGS + MAX_ENDINGS // 10:
            self._trim_endings()

    def _trim_endings(self) -> None:
        """Drop the oldest endings (by snapshot version) down to MAX_ENDINGS, and entries that are none (corrupt
        bytes, a field that is no id); done once per tenth over the bound."""
        raw: dict[Any, Any] = self.client.hgetall(self.endings_key)
        parsed = {k: self._parse(v, self.endings_key) if k.isdigit() else None for k, v in raw.items()}
        ended = {k: e for k, e in parsed.items() if e is not None}
        oldest = sorted(ended, key=lambda k: ended[k].version)[: max(0, len(ended) - MAX_ENDINGS)]
        if drop := oldest + [k for k, e in parsed.items() if e is None]:
            self.client.hdel(self.endings_key, *drop)

    @staticmethod
    def _parse(raw: bytes | str, key: str) -> LineageEvent | None:
        """The event ``raw`` holds, or None (with a warning naming ``key``) for an entry that is none: corrupt bytes
        in Redis must not stop a learner's restore, nor the tools."""
        try:
            return LineageEvent.from_json(raw)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s: skipped an entry that is no lineage event (%s: %s)", key, type(e).__name__, e)
            return None

    def known(self, topics: Iterable[int] = ()) -> list[LineageEvent]:
        """What a reader follows ``topics`` by: the events kept (:meth:`recent`), then, newest first, the events
        that ended those ids (and the ids they were merged into) whose end the list has dropped
        (``P:lineage:endings``). Without them, an id merged away more than DEFAULT_KEEP events ago was "no topic"
        to ``subscribe`` and ``label``."""
        events = self.recent()
        ended = endings(events)
        older: list[LineageEvent] = []
        asked: set[int] = set()
        todo = {int(t) for t in topics}
        while ask := sorted(t for t in todo if t not in ended and t not in asked):
            asked.update(ask)
            todo = set()
            for topic, raw in zip(ask, self.client.hmget(self.endings_key, [str(t) for t in ask]), strict=True):
                e = None if raw is None else self._parse(raw, self.endings_key)
                if e is not None:  # the event that ended ``topic`` (a birth names it as its parent)
                    older.append(e)
                    ended[topic] = e
                    if e.kind == "merge" and e.into is not None:
                        todo.add(e.into)
        return events + sorted(older, key=lambda e: e.version, reverse=True)

    def recent(self, n: int | None = None) -> list[LineageEvent]:
        """The newest ``n`` events (all kept if ``None``), newest first; an entry that is no event is skipped with a
        warning (:meth:`_parse`)."""
        raw = self.client.lrange(self.key, 0, -1 if n is None else max(n, 1) - 1)
        return [e for r in raw if (e := self._parse(r, self.key)) is not None]

    def counts(self) -> dict[str, int]:
        """Events ever pushed, by kind (not trimmed)."""
        raw: dict[Any, Any] = self.client.hgetall(self.counts_key)
        return {(k.decode() if isinstance(k, bytes) else str(k)): int(v) for k, v in raw.items()}


def endings(events: Iterable[LineageEvent]) -> dict[int, LineageEvent]:
    """Each id that ``events`` ended, with the event that ended it: merged away (``into`` carries it on), retired,
    or its slot given to another topic under a fresh id (a birth whose ``parent`` it is: :meth:`Lineage.renew`,
    :meth:`Lineage.catch_up`). An id ends once; a birth naming an id already merged or retired changes nothing."""
    events = list(events)
    ended = {e.topic: e for e in events if e.kind in ("merge", "retire")}
    for e in events:
        if e.kind == "birth" and e.parent is not None:
            ended.setdefault(e.parent, e)
    return ended


def follow(topic: int, ended: Mapping[int, LineageEvent]) -> tuple[list[LineageEvent], int | None]:
    """Where id ``topic`` went, by ``ended`` (:func:`endings`): the events on its way (merges, a chain of them,
    then perhaps an end) and the live id that carries it now, or None if it ended without one. ``topic`` itself,
    and no event, while it has not ended."""
    path: list[LineageEvent] = []
    seen = {topic}
    while topic in ended:
        e = ended[topic]
        path.append(e)
        if e.kind != "merge" or e.into is None or e.into in seen:
            return path, None
        topic = e.into
        seen.add(topic)
    return path, topic


def moved_slots(events: Iterable[LineageEvent], slot_ids: Sequence[int]) -> set[int]:
    """The slots ``events`` changed, with ``slot_ids`` the mapping after them: each event's own slot, a merge's
    ``into`` and a split's ``parent`` (they keep their ids but not their words)."""
    slots = set()
    for e in events:
        slots.add(e.slot)
        for kept in (e.into, e.parent if e.kind == "split" else None):
            if kept is not None and kept in slot_ids:
                slots.add(slot_ids.index(kept))
    return slots


def stamp(events: Sequence[LineageEvent], version: int, at: float) -> list[LineageEvent]:
    """``events`` with their snapshot version and time set: the learner records moves before
    ``SnapshotStore.save`` (so the mapping goes into the payload) and learns the version only from it."""
    return [replace(e, version=int(version), time=float(at)) for e in events]


def describe_event(e: LineageEvent) -> str:
    """What one event did, in words, e.g. ``merge topic 13 → 6 (Hellinger 0.048)`` (the learner logs its moves so)."""
    return f"{e.kind} {_what(e)}"


def _what(e: LineageEvent) -> str:
    """The words after the event's kind."""
    if e.kind == "merge":
        return f"topic {e.topic} → {e.into} (Hellinger {e.score:.3f})"
    if e.kind == "retire":
        return f"topic {e.topic} retired (weight {e.score:.4f})"
    if e.kind == "split":
        return f"topic {e.parent} split → {e.parent} + {e.topic} (slot {e.slot}, gain {e.score:.3f} nats/token)"
    if e.parent is not None:
        why = f"drift {e.score:.2f}" if e.score > 0 else "that id was announced gone"
        return f"topic {e.topic} born in slot {e.slot}, which held topic {e.parent} before ({why})"
    return f"topic {e.topic} born in slot {e.slot} (gain {e.score:.3f} nats/token)"


def render_lineage(events: Sequence[LineageEvent]) -> list[str]:
    """One line per event, as ``topicstream topics`` prints them under the table, e.g.
    ``v12 2026-11-23 19:40:00Z merge  topic 13 → 6 (Hellinger 0.048)``."""
    lines = []
    for e in events:
        when = datetime.fromtimestamp(e.time, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
        lines.append(f"v{e.version} {when} {e.kind:<6} {_what(e)}")
    return lines
