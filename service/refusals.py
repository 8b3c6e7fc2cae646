"""Batches the brokers refused as too large, remembered in Redis across restarts (``P:producer:refused``).

A refused output fails its batch, and the worker stops so that its next start reads the batch again
(:mod:`service.worker`). The next start keeps within the topic's ``max.message.bytes`` when the brokers say it
(:func:`service.kafka.size_limit`); where they do not (DescribeConfigs not allowed), before, every start sent the
same full batches and was refused again, for ever. Remembering at each refusal the smaller of the producer's
``message.max.bytes`` and the bytes refused (:attr:`service.pipeline.Publisher.too_large`, at least the size of any
refused batch) lets the next start send batches of half that, so the restarts end once the batches fit, each
logged. A remembered size stays until someone deletes it (``HDEL P:producer:refused <topic>``): a topic whose limit
was raised since, with DescribeConfigs still not allowed, keeps the smaller batches.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

__all__ = ["refusal_key", "remember", "remembered"]

log = logging.getLogger(__name__)

#: Sets each field (ARGV: field, size, field, size, …) of the hash KEYS[1] to its size unless the hash holds a
#: smaller whole number there already: one round trip, and two workers refused at once keep the smaller size.
_KEEP_SMALLER = """
for i = 1, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]))
  if not old or old <= 0 or tonumber(ARGV[i + 1]) < old then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
"""


def refusal_key(prefix: str) -> str:
    """The hash: topic → the bytes of the batches the brokers last refused for it, at most."""
    return f"{prefix}:producer:refused"


def remembered(client: redis.Redis, prefix: str) -> dict[str, int]:
    """The sizes remembered for each topic; ``{}`` when Redis does not answer (the brokers' limits, if they say
    them, still count). A value that is not a positive whole number (another program's) is left out."""
    try:
        raw = client.hgetall(refusal_key(prefix))
    except redis.exceptions.RedisError as e:
        log.warning("the sizes of batches refused before are not known (%s)", e)
        return {}
    sizes: dict[str, int] = {}
    for topic, size in raw.items():
        text = size.decode(errors="replace") if isinstance(size, bytes) else str(size)
        if text.isascii() and text.isdecimal() and int(text) > 0:
            sizes[topic.decode(errors="replace") if isinstance(topic, bytes) else str(topic)] = int(text)
    return sizes


def remember(client: redis.Redis, prefix: str, refused: Mapping[str, int], size: int) -> None:
    """Remember that the brokers refused batches for each topic of ``refused`` (topic → the bytes refused) while
    the producer's ``message.max.bytes`` was ``size``: the smaller of the two, unless a smaller size is remembered
    already. Never raises: the worker is stopping over the refusal, and a Redis that does not answer (or a user
    not allowed to write, as a replica's may be) only means the next start tries the same size again."""
    sizes = {topic: min(size, max(1, n)) for topic, n in refused.items() if topic}
    if not sizes:
        return
    args = [x for topic, n in sorted(sizes.items()) for x in (topic, str(n))]
    try:
        client.register_script(_KEEP_SMALLER)(keys=[refusal_key(prefix)], args=args)  # EVALSHA, as the ACL allows
    except redis.exceptions.RedisError as e:
        log.warning("could not remember the refused batch size for %s (%s)", sorted(sizes), e)
        return
    log.warning(
        "the brokers refused batches as too large (%s; the producer's message.max.bytes %d): the next start sends "
        "batches of at most half that, unless the brokers say the topic's limit (delete the field from %s to "
        "forget it)",
        ", ".join(f"{topic}: {n} bytes" for topic, n in sorted(sizes.items())),
        size,
        refusal_key(prefix),
    )
