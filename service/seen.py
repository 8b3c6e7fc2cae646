"""The ids a feed poller has already produced, bounded, in Redis: a restart or an overlapping poll never produces
an article twice, and a crash never loses one.

Two sorted sets per Redis prefix ``P`` hold article ids scored by Redis server time (so pollers on different
machines agree on the clock):

``P:feeds:seen``    ids whose event the broker acknowledged, scored by when; trimmed to the newest ``max_ids``
                    and to the last ``max_age_s`` seconds (keep the age longer than an entry stays in a feed)
``P:feeds:claims``  ids a poller is producing right now, scored by when its claim expires

A poller *claims* the ids of the entries it read (one script, atomic: an id already seen, or claimed by a live
claim, is refused), produces the claimed ones, waits for the broker's delivery reports, then *marks* the
acknowledged ids seen and *releases* the others. Two pollers that read the same entry at the same time produce it
once; a poller that dies between producing and marking leaves a claim that expires after ``claim_s`` seconds, and
the entry is produced again then (at least once, never lost).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

__all__ = ["SeenIds"]

# KEYS: seen, claims. ARGV: claim expiry (seconds from now), ids... Returns 1 per id claimed, 0 per id refused.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local until_ = now + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local claimed = redis.call('ZSCORE', KEYS[2], id)
  if redis.call('ZSCORE', KEYS[1], id) or (claimed and tonumber(claimed) > now) then
    out[#out + 1] = 0
  else
    redis.call('ZADD', KEYS[2], until_, id)
    out[#out + 1] = 1
  end
end
return out
"""

# KEYS: seen, claims. ARGV: max ids, max age (s), ids... Marks the ids seen, drops their claims, trims both sets.
_MARK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[1]) + 1))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
return redis.call('ZCARD', KEYS[1])
"""


class SeenIds:
    """Claim, mark and release article ids under one Redis prefix (see the module docstring)."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        max_ids: int = 1_000_000,
        max_age_s: float = 30 * 86400,
        claim_s: float = 300.0,
    ) -> None:
        if max_ids < 1 or max_age_s <= 0 or claim_s <= 0:
            raise ValueError("max_ids, max_age_s and claim_s must be positive")
        self.r = client
        self.keys = [f"{prefix}:feeds:seen", f"{prefix}:feeds:claims"]
        self.max_ids = max_ids
        self.max_age_s = max_age_s
        self.claim_s = claim_s
        self._claim = client.register_script(_CLAIM)
        self._mark = client.register_script(_MARK)

    def claim(self, ids: Sequence[str]) -> list[bool]:
        """For each id: True when this caller now holds it (produce it), False when it was seen or is claimed."""
        if not ids:
            return []
        return [bool(x) for x in self._claim(keys=self.keys, args=[self.claim_s, *ids])]

    def mark(self, ids: Sequence[str]) -> int:
        """Record ``ids`` (acknowledged by the broker) as seen, drop their claims, trim; returns the seen count."""
        return int(self._mark(keys=self.keys, args=[self.max_ids, self.max_age_s, *ids]))

    def release(self, ids: Sequence[str]) -> None:
        """Give up the claims on ``ids`` (their events were not acknowledged): the next poll produces them."""
        if ids:
            self.r.zrem(self.keys[1], *ids)

    def __len__(self) -> int:
        return int(self.r.zcard(self.keys[0]))

    def __contains__(self, article_id: object) -> bool:
        return self.r.zscore(self.keys[0], str(article_id)) is not None
