"""Names people give to topics (``topicstream label K "Oil prices"``), kept in Redis next to the model.

One hash per Redis prefix ``P``: ``P:topic-names`` maps a topic id (as a decimal string) to its name. The
learner never writes it, so names survive restarts and new snapshots; the publisher and ``topicstream topics``
read it with :meth:`TopicNames.all`.
"""

from __future__ import annotations

import redis

__all__ = ["MAX_NAME", "TopicNames"]

MAX_NAME = 80


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
        if any((ord(c) < 32 and c not in "\t\n\r") or ord(c) == 127 for c in name):
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
        """Carry names across a lineage event in one transaction: the name of topic ``old`` moves to ``new`` for
        each ``old: new`` in ``moves`` (``None``: the topic is gone and its name with it). A name already on a
        ``new`` id that is not itself moved away is kept. Returns the names afterwards."""
        current = self.all()
        after = {k: v for k, v in current.items() if k not in moves}
        for old, new in moves.items():
            if new is not None and old in current and new not in after:
                after[new] = current[old]
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(self.key)
        if after:
            pipe.hset(self.key, mapping={str(k): v for k, v in after.items()})
        pipe.execute()
        return dict(sorted(after.items()))

    def get(self, topic: int) -> str | None:
        raw = self.r.hget(self.key, str(topic))
        return raw.decode("utf-8") if isinstance(raw, bytes) else raw

    def all(self) -> dict[int, str]:
        """Every named topic: id → name (fields that are not topic ids are ignored)."""
        out: dict[int, str] = {}
        for k, v in self.r.hgetall(self.key).items():
            key = k.decode() if isinstance(k, bytes) else str(k)
            if key.isdigit():
                out[int(key)] = v.decode("utf-8") if isinstance(v, bytes) else str(v)
        return dict(sorted(out.items()))
