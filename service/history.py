"""A bounded history of snapshot summaries in Redis, for drift reports (``topicstream report``).

The learner writes ``P:summary`` at every snapshot (see ``SnapshotStore.put_summary``); it is overwritten each
time. :class:`SummaryHistory` keeps a compact copy of each summary (version, time, articles learned, and per topic
its prevalence and top words) so that the drift of the topics can be drawn later.

A stream never ends, so the history is thinned as it grows: it holds at most ``max_points`` records, dense near
the present and geometrically coarser into the past, and the oldest record is never dropped. When a record has to
go, the one dropped is the interior record ``i`` whose removal leaves the smallest gap relative to its age,

    score_i = (v[i+1] - v[i-1]) / (v[newest] - v[i]),      v = snapshot versions, oldest first,

so in the steady state the gap between kept records grows in proportion to their age: N points cover the whole
stream with spacing ≈ age · ln(age) / N. Memory in Redis is bounded by ``max_points`` records for ever.

Layout (``P`` = ``TOPICSTREAM_REDIS_PREFIX``): ``P:history:versions`` a sorted set of the kept versions (score =
version) and ``P:history:records`` a hash version → JSON record. Thinning reads only the sorted set, never the
records. Only the learner (one writer per prefix) appends.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import redis

__all__ = ["DEFAULT_MAX_POINTS", "TOP_WORDS", "SummaryHistory", "compact", "victims"]

log = logging.getLogger(__name__)

DEFAULT_MAX_POINTS = 240
"""Records kept per prefix: with K = 100 topics a record is ~15 kB, so under 4 MB in Redis at most."""
TOP_WORDS = 10
"""Top words kept per topic and record (enough to tell what a topic meant then)."""


def compact(summary: Mapping[str, Any], top_words: int = TOP_WORDS) -> dict[str, Any]:
    """The part of a ``P:summary`` object that the history keeps. Raises ``ValueError`` naming what is wrong."""
    missing = [key for key in ("version", "articles_learned", "topics") if key not in summary]
    if missing:
        raise ValueError(f"a summary needs {', '.join(missing)}; got keys {sorted(summary)}")
    topics = summary["topics"]
    if not isinstance(topics, Sequence) or isinstance(topics, str):
        raise ValueError(f"a summary's topics must be a list, got {type(topics).__name__}")
    out_topics = []
    for t in topics:
        try:
            k, p, words = int(t["topic"]), float(t["prevalence"]), t["top_words"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"a summary topic needs topic, prevalence and top_words; got {t!r}") from e
        if not math.isfinite(p) or p < 0:
            raise ValueError(f"topic {k} has prevalence {p!r}; expected a finite number >= 0")
        out_topics.append({"topic": k, "prevalence": round(p, 6), "top_words": [str(w) for w in words[:top_words]]})
    record: dict[str, Any] = {
        "version": int(summary["version"]),
        "created_at": float(summary.get("created_at", 0.0)),
        "articles_learned": int(summary["articles_learned"]),
        "topics": out_topics,
    }
    if "algorithm" in summary:
        record["algorithm"] = str(summary["algorithm"])
    return record


def victims(versions: Sequence[int], max_points: int) -> list[int]:
    """The versions to drop so that at most ``max_points`` remain (see the module docstring for the rule).

    ``versions`` must be strictly increasing. The oldest and the newest are always kept.
    """
    kept = list(versions)
    dropped: list[int] = []
    while len(kept) > max_points:
        newest = kept[-1]
        best_i, best = 1, math.inf
        for i in range(1, len(kept) - 1):
            score = (kept[i + 1] - kept[i - 1]) / (newest - kept[i])
            if score < best:  # ties: the oldest goes first
                best_i, best = i, score
        dropped.append(kept.pop(best_i))
    return dropped


class SummaryHistory:
    """Append snapshot summaries; read them back oldest first. Bounded by ``max_points`` records."""

    def __init__(self, client: redis.Redis, prefix: str = "topicstream", max_points: int = DEFAULT_MAX_POINTS):
        if max_points < 3:
            raise ValueError(f"max_points must be >= 3 (the oldest, the newest and one between), got {max_points}")
        self.r = client
        self.prefix = prefix
        self.max_points = max_points
        self.versions_key = f"{prefix}:history:versions"
        self.records_key = f"{prefix}:history:records"

    def append(self, summary: Mapping[str, Any]) -> list[int]:
        """Store a compact copy of ``summary`` and thin the history; returns the versions dropped.

        A summary with a version already stored replaces it.
        """
        record = compact(summary)
        v = record["version"]
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self.records_key, str(v), json.dumps(record, separators=(",", ":")))
        pipe.zadd(self.versions_key, {str(v): v})
        pipe.execute()
        kept, junk = self._members()
        dropped = victims(kept, self.max_points)
        if dropped or junk:
            names = [str(d) for d in dropped]
            pipe = self.r.pipeline(transaction=True)
            pipe.zrem(self.versions_key, *names, *junk)  # junk: only its writer (this one) keeps it clean
            if names:
                pipe.hdel(self.records_key, *names)
            pipe.execute()
        return dropped

    def versions(self) -> list[int]:
        """The versions kept, oldest first (a member that is no version is logged and passed over)."""
        return self._members()[0]

    def _members(self) -> tuple[list[int], list[bytes]]:
        """The members of the sorted set that are versions, oldest first, and those that are not (written by
        something else: before, one stopped every later append and every ``topicstream report``)."""
        members: list[bytes] = self.r.zrange(self.versions_key, 0, -1)  # type: ignore[assignment]
        kept, junk = [], []
        for m in members:  # a version as this module writes it: "7", never "07", " 7" or "+7" (int() takes those)
            if m.isdigit() and (m == b"0" or not m.startswith(b"0")):
                kept.append(int(m))
            else:
                junk.append(m)
        if junk:
            log.warning("%s holds %d members that are no version (%r...); passed over", self.versions_key,
                        len(junk), junk[0][:40])  # fmt: skip
        return sorted(kept), junk

    def read(self) -> list[dict[str, Any]]:
        """The records kept, oldest first. A record that cannot be decoded is logged and left out (not deleted)."""
        names = [str(v) for v in self.versions()]
        if not names:
            return []
        out = []
        for name, raw in zip(names, self.r.hmget(self.records_key, names), strict=True):
            if raw is None:
                continue  # dropped between the two reads
            try:
                out.append(json.loads(raw))
            except (json.JSONDecodeError, UnicodeDecodeError):
                log.warning("history record %s under %r is not JSON; left out", name, self.records_key)
        return out
