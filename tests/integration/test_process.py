"""``topicstream run`` as a real process: /metrics after a run, and SIGTERM leaves a final snapshot + commits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.dev.localstack import free_port
from service.schemas import Article
from service.settings import Settings
from service.snapshot import SnapshotStore

from .helpers import BAD, CONNECTION_FIELDS, TEST_SIZE_FIELDS, committed, env_for, good_articles, produce

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def total(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def test_metrics_and_sigterm(settings: Settings) -> None:
    s = settings
    port = free_port()
    env = {**os.environ, **env_for(s, (*CONNECTION_FIELDS, "group_id", *TEST_SIZE_FIELDS))}
    env["TOPICSTREAM_METRICS_PORT"] = str(port)
    env["TOPICSTREAM_MAX_ARTICLE_BYTES"] = "4096"
    env["TOPICSTREAM_SNAPSHOT_EVERY_S"] = "3600"
    env["TOPICSTREAM_SNAPSHOT_EVERY_BATCHES"] = "1000"  # only the SIGTERM snapshot
    # Two valid articles about nothing the vocabulary holds: stop words only, and one word of one article (a word
    # needs two documents to be given a slot).
    wordless = [
        json.dumps({"id": "stop-words", "title": "The", "text": "and of the"}).encode(),
        json.dumps({"id": "one-word", "title": "Zyzzogeton", "text": "zyzzogeton zyzzogeton"}).encode(),
    ]
    good = good_articles(300, seed=3) + wordless
    tokenizer = s.tokenizer()
    tokens_in = sum(len(tokenizer(Article.model_validate_json(m).content())) for m in good)
    last = produce(s, good + list(BAD))
    n_all = len(good) + len(BAD)

    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 180
        samples: dict = {}
        while time.monotonic() < deadline:
            try:
                samples = scrape(port)
                if total(samples, "topicstream_articles_consumed_total") >= n_all:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        # The last batch's acknowledgements land in the counters a moment after it is consumed.
        while time.monotonic() < deadline:
            samples = scrape(port)
            acked = value(samples, "topicstream_articles_published_total") >= len(good)
            if acked and total(samples, "topicstream_articles_dead_lettered_total") >= len(BAD):
                break
            time.sleep(0.2)

        assert value(samples, "topicstream_articles_consumed_total") == n_all
        assert value(samples, "topicstream_articles_published_total") == len(good)
        assert total(samples, "topicstream_articles_dead_lettered_total") == len(BAD)
        assert value(samples, "topicstream_articles_dead_lettered_total", reason="oversize") == 1
        # Every token the tokenizer keeps is counted once: learned (in the vocabulary) or dropped (no slot).
        learned_tokens = value(samples, "topicstream_tokens_total")
        assert learned_tokens > 10 * len(good) and value(samples, "topicstream_oov_tokens_total") >= 3
        assert learned_tokens + value(samples, "topicstream_oov_tokens_total") == tokens_in
        assert value(samples, "topicstream_articles_without_words_total") == len(wordless)
        assert value(samples, "topicstream_batches_total") >= 1
        for stage in ("decode", "tokenize", "kernel", "publish", "commit"):
            assert value(samples, "topicstream_batch_duration_seconds_count", stage=stage) >= 1
        assert value(samples, "topicstream_end_to_end_latency_seconds_count") == len(good)
        assert 0 < value(samples, "topicstream_end_to_end_latency_seconds_sum") / len(good) < 120
        words = value(samples, "topicstream_vocabulary_words")
        assert 0 < words <= value(samples, "topicstream_vocabulary_capacity_words") == s.vocab_size
        prevalence = [v for (n, _), v in samples.items() if n == "topicstream_topic_prevalence"]
        assert len(prevalence) == s.topics and abs(sum(prevalence) - 1) < 1e-6
        assert 1 <= value(samples, "topicstream_topics_used") <= s.topics
        assert value(samples, "topicstream_topic_slots") == s.topics
        top = sorted(prevalence, reverse=True)
        held = int(value(samples, "topicstream_topics_holding_mass"))  # the fewest topics holding 95 %
        assert 1 <= held <= s.topics and sum(top[:held]) >= 0.95 - 1e-6 and sum(top[: held - 1]) < 0.95
        lags = [v for (n, _), v in samples.items() if n == "topicstream_consumer_lag_messages"]
        assert lags and all(v >= 0 for v in lags)
        info = {"algorithm": s.algorithm, "topics": str(s.topics), "role": "learner", "version": version("topicstream")}
        assert value(samples, "topicstream_model_info", **info) == 1  # the version tells old processes from new

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # SIGTERM left a final snapshot of everything learned, with the offsets, and committed offsets.
    expected = {p: off + 1 for p, off in last.items()}
    meta, payload = SnapshotStore.from_url(s.redis_url, prefix=s.redis_prefix).load()
    assert {p: o for _, p, o in payload["offsets"]} == expected
    assert payload["kernel"]["state"]["n_docs_seen"] == len(good)
    assert committed(s, s.learner_group(), 2) == expected
    assert json.loads(json.dumps(meta))["articles_learned"] == len(good)
