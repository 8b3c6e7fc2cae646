"""Batches the brokers refused as too large, remembered in Redis across restarts (``P:producer:refused``).

A refused output fails its batch, and the worker stops so that its next start reads the batch again
(:mod:`service.worker`). The next start keeps within the topic's ``max.message.bytes`` when the brokers say it
(:func:`service.kafka.size_limit`); where they do not (DescribeConfigs not allowed), before, every start sent the
same full batches and was refused again, for ever. Remembering the producer's ``message.max.bytes`` at each
refusal lets the next start halve it, so the restarts end once the batches fit: about log2(1 MB / the limit) of
them, each one logged.
"""

from __future__ import annotations

import logging

import redis

__all__ = ["refusal_key", "remember", "remembered"]

log = logging.getLogger(__name__)


def refusal_key(prefix: str) -> str:
    """The hash: topic → the producer's ``message.max.bytes`` when the brokers last refused a batch for it."""
    return f"{prefix}:producer:refused"


def remembered(client: redis.Redis, prefix: str) -> dict[str, int]:
    """The sizes remembered for each topic; ``{}`` when Redis does not answer (the brokers' limits, if they say
    them, still count) or a value is not a whole number (another program's: left as it is)."""
    try:
        raw = client.hgetall(refusal_key(prefix))
    except redis.exceptions.RedisError as e:
        log.warning("the sizes of batches refused before are not known (%s)", e)
        return {}
    sizes: dict[str, int] = {}
    for topic, size in raw.items():
        text = size.decode(errors="replace") if isinstance(size, bytes) else str(size)
        if text.isdigit():
            sizes[topic.decode(errors="replace") if isinstance(topic, bytes) else str(topic)] = int(text)
    return sizes


def remember(client: redis.Redis, prefix: str, topics: set[str], size: int) -> None:
    """Remember that the brokers refused a batch of at most ``size`` bytes (the producer's ``message.max.bytes``)
    for each of ``topics``; a smaller size remembered before stays. Never raises: the worker is stopping over the
    refusal, and a Redis that does not answer only means the next start tries the same size again."""
    known = remembered(client, prefix)
    smaller = {t: size for t in topics if t and size < known.get(t, size + 1)}
    if not smaller:
        return
    try:
        client.hset(refusal_key(prefix), mapping=smaller)  # type: ignore[arg-type]
    except redis.exceptions.RedisError as e:
        log.warning("could not remember the refused batch size for %s (%s)", sorted(smaller), e)
        return
    log.warning(
        "the brokers refused a batch for %s as too large at message.max.bytes %d: the next start sends batches of "
        "at most half that, unless the brokers say the topic's limit (key %s)",
        ", ".join(sorted(smaller)),
        size,
        refusal_key(prefix),
    )
