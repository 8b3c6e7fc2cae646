"""Names people give to topics (``topicstream label K "Oil prices"``), kept in Redis next to the model.

One hash per Redis prefix ``P``: ``P:topic-names`` maps a topic id (as a decimal string) to its name. Names
survive restarts and new snapshots; the publisher and ``topicstream topics`` read them with :meth:`TopicNames.all`.
The learner writes only to carry them along its lineage events (:meth:`TopicNames.follow`): a merged-away id's name
goes to the id that carries it now (joined to that id's own name, if it has one), a retired id's name goes with it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

import redis

from .lineage import LineageEvent, endings, follow

__all__ = ["MAX_NAME", "TopicNames"]

MAX_NAME = 80


def _joined(kept: str, merged: str) -> str:
    """The name of a topic that another named topic was merged into: both, the merged one's unless it is there."""
    if merged in kept.split(" / "):
        return kept
    both = f"{kept} / {merged}"
    return both if len(both) <= MAX_NAME else both[: MAX_NAME - 1] + "…"


class TopicNames:
    """Read and write topic names under one Redis prefix."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.r = client
        self.key = f"{prefix}:topic-names"

    @staticmethod
    def check(topic: int, name: str) -> str:
        """``name`` tidied (whitespace collapsed); raises ValueError for a negative topic id or a name that is
        empty, longer than :data:`MAX_NAME` characters, or holds control characters."""
        if topic < 0:
            raise ValueError(f"a topic id is >= 0, got {topic}")
        if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in name):  # C0, DEL and C1 (CSI...)
            raise ValueError("a topic name cannot hold control characters")
        tidy = " ".join(name.split())
        if not tidy:
            raise ValueError("a topic name cannot be empty")
        if len(tidy) > MAX_NAME:
            raise ValueError(f"a topic name has at most {MAX_NAME} characters, got {len(tidy)}")
        return tidy

    def set(self, topic: int, name: str) -> str:
        """Name ``topic`` (replacing its old name); returns the name as stored."""
        tidy = self.check(topic, name)
        self.r.hset(self.key, str(topic), tidy)
        return tidy

    def clear(self, topic: int) -> bool:
        """Forget the name of ``topic``; True when it had one."""
        return bool(self.r.hdel(self.key, str(topic)))

    def remap(self, moves: dict[int, int | None]) -> dict[int, str]:
        """Carry names across lineage events in one transaction: the name of topic ``old`` moves to ``new`` for
        each ``old: new`` in ``moves`` (``None``: the topic is gone and its name with it). When ``new`` has a
        name already, the two are joined ("Energy / Oil prices", cut to :data:`MAX_NAME`). Atomic against a
        concurrent ``topicstream label`` (the hash is watched, and read again if it changed); fields that are not
        topic ids are left alone. Returns the names afterwards."""
        result: dict[int, str] = {}

        def move(pipe: redis.client.Pipeline) -> None:
            current = self._parse(pipe.hgetall(self.key))  # watched: read at once, outside the transaction
            after = {k: v for k, v in current.items() if k not in moves}
            for old, new in moves.items():
                if new is not None and old in current:
                    after[new] = _joined(after[new], current[old]) if new in after else current[old]
            pipe.multi()
            if current:
                pipe.hdel(self.key, *(str(k) for k in current))
            if after:
                pipe.hset(self.key, mapping={str(k): v for k, v in after.items()})
            result.clear()
            result.update(after)

        self.r.transaction(move, self.key)
        return dict(sorted(result.items()))

    def follow(self, events: Iterable[LineageEvent]) -> None:
        """Carry the names along lineage ``events``: a merged-away id's to its ``into``, a retired id's away, and
        the name of an id whose slot a birth took over (``parent``, :meth:`service.lineage.Lineage.renew`) away:
        that topic ended, and the new one in its slot is another."""
        ended = endings(events)
        moves = {gone: follow(gone, ended)[1] for gone in ended}  # to the end of a chain: a into b, b into c: c
        if moves:
            self.remap(moves)

    def get(self, topic: int) -> str | None:
        raw = self.r.hget(self.key, str(topic))
        return None if raw is None else _text(raw)

    def all(self) -> dict[int, str]:
        """Every named topic: id → name (fields that are not topic ids are ignored)."""
        return self._parse(self.r.hgetall(self.key))

    @staticmethod
    def _parse(raw: Any) -> dict[int, str]:
        out: dict[int, str] = {}
        for k, v in raw.items():
            key = _text(k)
            if key.isascii() and key.isdigit():  # "²".isdigit() is true too, and int() refuses it
                out[int(key)] = _text(v)
        return dict(sorted(out.items()))


def _text(raw: bytes | str) -> str:
    """A field or name as text. Bytes that are not UTF-8 (written around ``label``, which checks what it stores)
    become U+FFFD rather than failing every reader and every later remap."""
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
