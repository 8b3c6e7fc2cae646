"""The command line's failures that are the world's, not a bug: one clear red line and an exit code, no traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import typer
from rich.console import Console

from .settings import Settings

__all__ = ["api_port_is_fatal", "err", "outputs_refused_is_fatal", "serve_metrics", "unreachable_is_fatal"]

#: Where every command writes what it tells a person (stdout is for data: JSON lines, tables asked for).
err = Console(stderr=True, soft_wrap=True)  # one message, one line, also when stderr is not a terminal


def serve_metrics(metrics: Any, settings: Settings) -> None:
    """Serve ``/metrics`` and ``/healthz``, or exit 2 with one line when the port is taken (another process on this
    host)."""
    try:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    except OSError as e:
        where = f"{settings.metrics_host}:{settings.metrics_port}"
        err.print(f"[red]cannot serve /metrics on {where}: {e.strerror or e}[/red] (TOPICSTREAM_METRICS_PORT)")
        raise typer.Exit(2) from None


@contextlib.contextmanager
def api_port_is_fatal(settings: Settings) -> Iterator[None]:
    """Exit 2 with one line when the HTTP API's port is taken (another process on this host)."""
    try:
        yield
    except OSError as e:
        where = f"{settings.api_host}:{settings.api_port}"
        err.print(f"[red]cannot serve the HTTP API on {where}: {e.strerror or e}[/red] (TOPICSTREAM_API_PORT)")
        raise typer.Exit(2) from None


@contextlib.contextmanager
def unreachable_is_fatal(settings: Settings) -> Iterator[None]:
    """Turn "cannot reach Kafka/Redis" into one clear line and exit code 3 instead of a traceback (a Kafka client
    configuration librdkafka refuses, e.g. an unknown property in TOPICSTREAM_KAFKA_CONFIG, or a Redis key of
    another type under the prefix: exit 2)."""
    import redis
    from confluent_kafka import KafkaError, KafkaException

    from .keys import KeyTypeError, wrong_types
    from .redact import redact_url, scrub
    from .snapshot import connect

    try:
        yield
    except KeyTypeError as e:
        _wrong_types_are_fatal(e.lines, settings.redis_prefix)
    except redis.exceptions.ResponseError as e:
        if "WRONGTYPE" not in str(e):
            _refusal_is_fatal(e, settings.redis_url)
            raise
        try:
            lines = wrong_types(connect(settings.redis_url), settings.redis_prefix)
        except redis.exceptions.RedisError:
            lines = []  # gone meanwhile: the generic line
        _wrong_types_are_fatal(lines, settings.redis_prefix)
    except redis.exceptions.AuthenticationError as e:
        url, why = redact_url(settings.redis_url), scrub(str(e), settings.redis_url)
        err.print(f"[red]Redis at {url} refused the credentials: {why}[/red] (TOPICSTREAM_REDIS_URL)")
        raise typer.Exit(3) from None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
        url, why = redact_url(settings.redis_url), scrub(str(e), settings.redis_url)
        err.print(f"[red]cannot reach Redis at {url}: {why}[/red] (TOPICSTREAM_REDIS_URL)")
        raise typer.Exit(3) from None
    except KafkaException as e:
        error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError._INVALID_ARG:  # the client's configuration, not the broker
            err.print(f"[red]Kafka client configuration: {error.str()}[/red] (TOPICSTREAM_KAFKA_CONFIG)")
            raise typer.Exit(2) from None
        err.print(f"[red]Kafka at {settings.kafka_bootstrap}: {e}[/red] (TOPICSTREAM_KAFKA_BOOTSTRAP)")
        raise typer.Exit(3) from None


#: Redis's refusals that are the deployment's, not a bug, by words of their message (inside a Lua script they come
#: as a plain ResponseError): what it means, and the exit code.
_REFUSALS = (
    (
        ("NOPERM", "no permissions", "executing the script can't"),
        "its user lacks a command or key topicstream needs (deploy/README.md, Redis)",
        2,
    ),
    (("READONLY", "read only replica"), "it is a read-only replica: point TOPICSTREAM_REDIS_URL at the primary", 2),
    (("OOM command", "maxmemory"), "it is full (maxmemory): give it more memory (deploy/README.md, Redis)", 3),
)


def _refusal_is_fatal(e: Exception, url: str) -> None:
    """One line and exit 2 (3: Redis full) for a Redis that refuses the service's commands (an ACL, a read-only
    replica, maxmemory); returns for any other error."""
    from .redact import redact_url, scrub

    text = str(e)
    for words, meaning, code in _REFUSALS:
        if any(w in text for w in words):
            why = scrub(text, url).splitlines()[0]
            err.print(f"[red]Redis at {redact_url(url)} refused a command: {meaning}[/red] ({why})")
            raise typer.Exit(code) from None


def _wrong_types_are_fatal(lines: list[str], prefix: str) -> None:
    for line in lines or ["a Redis key under the prefix holds a value of another type than topicstream keeps there"]:
        err.print(f"[red]{line}[/red]")
    err.print(
        f"another program writing under TOPICSTREAM_REDIS_PREFIX={prefix!r}? Delete the key (it is not deleted for "
        "you: it may be that program's) or choose another prefix"
    )
    raise typer.Exit(2) from None


@contextlib.contextmanager
def outputs_refused_is_fatal() -> Iterator[None]:
    """A learner or replica whose outputs the broker refused (or did not take within ``message.timeout.ms``, when
    an operator sets one: the default retries for ever) stops with nothing committed after them: one red line and
    exit 1 instead of a traceback. The next start reads those articles again."""
    from .kafka import DeliveryError

    try:
        yield
    except DeliveryError as e:
        err.print(f"[red]outputs not delivered, stopping (the next start reads them again): {e}[/red]")
        raise typer.Exit(1) from None
