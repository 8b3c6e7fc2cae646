"""``service.refusals`` on a real Redis: what is remembered of batches the brokers refused as too large."""

from __future__ import annotations

import socket

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.refusals import refusal_key, remember, remembered
from service.settings import Settings


def test_the_smaller_size_is_kept_and_what_is_not_a_positive_whole_number_is_left_out(settings: Settings) -> None:
    client, prefix = redis.Redis.from_url(settings.redis_url), settings.redis_prefix
    remember(client, prefix, {"out": 40_000, "dlq": 5_000_000}, 1_000_000)
    assert remembered(client, prefix) == {"out": 40_000, "dlq": 1_000_000}  # the bytes refused, at most the limit
    remember(client, prefix, {"out": 90_000}, 500_000)  # a larger size refused later: the smaller stays
    remember(client, prefix, {"dlq": 300}, 500_000)
    assert remembered(client, prefix) == {"out": 40_000, "dlq": 300}
    client.hset(refusal_key(prefix), mapping={"sup": "²", "zero": "0", "minus": "-5", "word": "abc"})
    assert remembered(client, prefix) == {"out": 40_000, "dlq": 300}
    remember(client, prefix, {"zero": 7_000}, 500_000)  # an unreadable value is replaced
    assert remembered(client, prefix)["zero"] == 7_000


def test_a_redis_that_does_not_answer_costs_the_memory_not_the_worker() -> None:
    """Both run where a failure already stops the worker, or at its start: neither may raise instead."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refused = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    assert remembered(refused, "p") == {}
    remember(refused, "p", {"out": 1_000}, 1_000_000)
