"""The Redis keys topicstream keeps under one prefix ``P`` (``TOPICSTREAM_REDIS_PREFIX``), and their types.

:data:`KEYS` is the one list: docs/architecture.md's table of keys is generated from it (``make docs``), and
:func:`check_types` tells which of them hold a value of another type — another program writing under the same
prefix, or an operator's ``SET`` on the wrong key. Redis answers every command on such a key with ``WRONGTYPE``.
The learner and the replica check as they start (:class:`service.worker.BatchWorker`, the learner before it takes
the lease), and so do ``feeds`` and ``subscribe`` (which would otherwise retry or wait for ever); every command
turns a ``WRONGTYPE`` into one line naming the key (:func:`service.cli_errors.unreachable_is_fatal`) instead of a
traceback, or a learner that writes no summary.
Nothing here deletes a key: it may hold another program's data.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

__all__ = ["KEYS", "KeyTypeError", "RedisKey", "check_types", "eviction_risk", "keys_table", "wrong_types"]


@dataclass(frozen=True)
class RedisKey:
    """One key (or key pattern, ``<v>``) under the prefix: its Redis type (as ``TYPE`` names it; ``channel`` for
    a pub/sub channel, which is no key), who writes it and what it holds."""

    name: str
    type: str
    writer: str
    holds: str
    expires: bool = False


KEYS: tuple[RedisKey, ...] = (
    RedisKey("snapshot:version", "string", "learner", "the last version number handed out"),
    RedisKey("snapshot:<v>:data", "string", "learner", "the payload of version v (above)"),
    RedisKey("snapshot:<v>:meta", "string", "learner", "the meta of version v, JSON"),
    RedisKey("snapshot:latest", "string", "learner", "the newest committed version; only moves forward"),
    RedisKey(
        "snapshot:kept", "zset", "learner",
        "the newest `TOPICSTREAM_SNAPSHOT_KEEP` committed versions (fallbacks)",
    ),
    RedisKey("snapshots", "channel", "learner", "the version number, each time `latest` moves"),
    RedisKey(
        "summary", "string", "learner",
        "JSON: the newest topics with top words, prevalence and drift (`topicstream topics`)",
    ),
    RedisKey("history:versions", "zset", "learner", "versions of the summaries kept for the drift report"),
    RedisKey("history:records", "hash", "learner", "version → compact summary (`topicstream report`)"),
    RedisKey(
        "lease:learner", "hash", "learner", "the lease holder: `id`, `host`, `pid`, `token`, `acquired_at`",
        expires=True,
    ),
    RedisKey("lease:learner:token", "string", "learner", "the newest fencing token handed out"),
    RedisKey(
        "lease:learner:grace", "string", "standby learner",
        "until when the lease is left to its holder after Redis lost the counter", expires=True,
    ),
    RedisKey(
        "lineage", "list", "learner",
        "lineage events (hygiene's merges, splits, births, retirements, and the fresh ids of topics that changed "
        "meaning without a move), newest first, at most 1,000 (also on the Kafka lineage topic, "
        "`<output topic>.lineage`)",
    ),
    RedisKey("lineage:counts", "hash", "learner", "event kind → count"),
    RedisKey(
        "lineage:endings", "hash", "learner",
        "topic id → the lineage event that ended it (merged away, retired, or its slot given to another topic), "
        "for the newest 10,000 ids ended: what `subscribe` and `label` follow an id by once `lineage` dropped it",
    ),
    RedisKey(
        "topic-names", "hash", "`topicstream label`; the learner moves names along merges and retirements",
        "stable topic id → name given by people",
    ),
    RedisKey(
        "producer:refused", "hash", "learner, replica",
        "topic → the size of the batches the brokers refused for it as too large, at most; the next start sends "
        "half that where the brokers do not say the topic's limit (`HDEL` a field to forget it)",
    ),
    RedisKey("feeds:seen", "zset", "`topicstream feeds`", "article ids the broker acknowledged, scored by time"),
    RedisKey(
        "feeds:claims", "zset", "`topicstream feeds`", "ids being produced now, scored by when the claim expires"
    ),
)  # fmt: skip

_TYPE_WORDS = {"zset": "sorted set", "channel": "pub/sub channel"}


def _word(kind: str) -> str:
    return _TYPE_WORDS.get(kind, kind)


class KeyTypeError(RuntimeError):
    """Keys under the prefix that hold a value of another type than topicstream keeps there; one line each."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def wrong_types(client: redis.Redis, prefix: str) -> list[str]:
    """One line per key of :data:`KEYS` (patterns and the channel aside) that exists with another type."""
    fixed = [k for k in KEYS if "<" not in k.name and k.type != "channel"]
    pipe = client.pipeline(transaction=False)
    for k in fixed:
        pipe.type(f"{prefix}:{k.name}")
    found = pipe.execute()
    lines = []
    for k, got in zip(fixed, found, strict=True):
        kind = got.decode() if isinstance(got, bytes) else str(got)
        if kind not in ("none", k.type):
            lines.append(f"Redis key {prefix}:{k.name} is a {_word(kind)} where topicstream keeps a {_word(k.type)}")
    return lines


def check_types(client: redis.Redis, prefix: str) -> None:
    """Raise :class:`KeyTypeError` when :func:`wrong_types` finds any."""
    lines = wrong_types(client, prefix)
    if lines:
        raise KeyTypeError(lines)


def keys_table() -> str:
    """The table of keys in docs/architecture.md."""
    rows = ["| key | type | written by | holds |\n", "|---|---|---|---|\n"]
    for k in KEYS:
        kind = _word(k.type) + (", with expiry" if k.expires else "")
        rows.append(f"| `P:{k.name}` | {kind} | {k.writer} | {k.holds} |\n")
    return "".join(rows)


def eviction_risk(client: redis.Redis) -> str | None:
    """A warning when Redis may evict topicstream's keys: a ``maxmemory`` with any policy but ``noeviction``.
    ``volatile-*`` policies evict the keys with an expiry, the lease among them (a standby then takes over from a
    healthy learner); ``allkeys-*`` evict snapshots without a word, and a learner whose kept versions lost their data
    refuses to start over them. None when Redis does not say (``INFO`` refused) or cannot evict."""
    try:
        memory = client.info("memory")
    except redis.exceptions.RedisError:
        return None
    policy, limit = memory.get("maxmemory_policy", "noeviction"), int(memory.get("maxmemory", 0) or 0)
    if limit == 0 or policy == "noeviction":
        return None
    return (
        f"Redis evicts keys when it is full (maxmemory {limit} bytes, maxmemory-policy {policy}): it may evict the "
        "learner's lease or its snapshots; give topicstream a Redis with maxmemory-policy noeviction "
        "(deploy/README.md, Redis)"
    )
