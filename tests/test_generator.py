"""The offline article generator: schema, determinism, planted structure."""

from __future__ import annotations

import io
import itertools
import json
from collections import Counter
from contextlib import redirect_stdout
from datetime import datetime, timezone

import numpy as np
import pytest

from service.dev import generator
from service.dev.generator import BACKGROUND_WORDS, PLANTED_TOPICS, TITLE_TEMPLATES, generate_articles
from service.text import Tokenizer


def _unique_words() -> dict[str, str]:
    """Words that belong to exactly one planted topic -> that topic."""
    counts = Counter(w for ws in PLANTED_TOPICS.values() for w in ws)
    return {w: name for name, ws in PLANTED_TOPICS.items() for w in ws if counts[w] == 1}


def test_planted_topics_are_news_like_and_survive_the_tokenizer() -> None:
    assert 12 <= len(PLANTED_TOPICS) <= 16
    tok = Tokenizer()
    for name, words in PLANTED_TOPICS.items():
        assert 30 <= len(words) <= 50, name
        assert len(set(words)) == len(words), f"{name} repeats a word"
        dropped = [w for w in words if tok(w) != [w]]
        assert not dropped, f"{name}: the tokenizer drops {dropped}"
        assert name in TITLE_TEMPLATES
    shared = [w for w, c in Counter(w for ws in PLANTED_TOPICS.values() for w in ws).items() if c > 1]
    assert 5 <= len(shared) < 0.2 * sum(map(len, PLANTED_TOPICS.values())), "a few shared words, not many"
    assert len(_unique_words()) >= 30 * len(PLANTED_TOPICS)
    assert BACKGROUND_WORDS


def test_articles_match_the_input_event_schema() -> None:
    start = datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)
    arts = list(generate_articles(300, seed=3, start=start))
    assert len(arts) == 300
    previous = start
    for art in arts:
        back = json.loads(json.dumps(art, ensure_ascii=False).encode("utf-8"))
        assert back == art
        assert isinstance(art["id"], str) and 1 <= len(art["id"]) <= 256
        assert isinstance(art["text"], str) and art["text"]
        assert isinstance(art["title"], str) and art["title"]
        assert "{" not in art["title"] and "}" not in art["title"]
        assert art["source"] == "generator"
        assert art["language"] == "en"
        assert art["label"] in PLANTED_TOPICS
        assert art["published_at"].endswith("Z")
        published = datetime.fromisoformat(art["published_at"].replace("Z", "+00:00"))
        assert published.tzinfo is not None
        assert published >= previous
        previous = published
    assert arts[0]["published_at"] == "2024-05-06T07:08:09Z"
    lengths = [len(a["text"].split()) for a in arts]
    assert 100 <= float(np.mean(lengths)) <= 180
    assert min(lengths) >= 60


def test_naive_start_is_utc_and_default_start_is_fixed() -> None:
    (naive,) = generate_articles(1, start=datetime(2024, 1, 2, 3, 4, 5))
    assert naive["published_at"] == "2024-01-02T03:04:05Z"
    (default,) = generate_articles(1)
    assert default["published_at"] == generator.DEFAULT_START.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_deterministic_for_a_seed_and_prefix_stable() -> None:
    a = list(generate_articles(150, seed=7))
    b = list(generate_articles(150, seed=7))
    assert a == b
    assert list(generate_articles(70, seed=7)) == a[:70]  # n only truncates
    c = list(generate_articles(150, seed=8))
    assert [x["text"] for x in a] != [x["text"] for x in c]


def test_endless_and_edge_counts() -> None:
    arts = list(itertools.islice(generate_articles(None, seed=1), 200))
    assert len(arts) == 200
    assert list(generate_articles(0)) == []
    with pytest.raises(ValueError):
        list(generate_articles(-1))


def test_ids_unique() -> None:
    ids = [a["id"] for a in generate_articles(5000, seed=2)]
    assert len(set(ids)) == len(ids)
    other = {a["id"] for a in generate_articles(100, seed=3)}
    assert not other & set(ids), "ids of different seeds do not collide"


def test_labels_follow_the_planted_mixture() -> None:
    tok = Tokenizer()
    unique = _unique_words()
    arts = list(generate_articles(4000, seed=5))
    agree = 0
    for art in arts:
        by_topic = Counter(unique[w] for w in tok(art["text"]) if w in unique)
        agree += by_topic.most_common(1)[0][0] == art["label"]
        # The label's topic always contributes words.
        assert by_topic[art["label"]] > 0
    assert agree / len(arts) >= 0.9
    labels = Counter(a["label"] for a in arts)
    assert set(labels) == set(PLANTED_TOPICS), "every planted topic leads some articles"
    assert max(labels.values()) < 0.35 * len(arts)


def test_articles_mix_several_topics() -> None:
    tok = Tokenizer()
    unique = _unique_words()
    n_topics = []
    for art in generate_articles(2000, seed=11):
        by_topic = Counter(unique[w] for w in tok(art["text"]) if w in unique)
        n_topics.append(sum(1 for c in by_topic.values() if c >= 3))
    share_multi = np.mean([k >= 2 for k in n_topics])
    assert 0.3 <= share_multi <= 0.8
    assert max(n_topics) <= 3


def test_prevalence_drifts_over_time() -> None:
    rng = np.random.default_rng(0)
    prev = generator._Prevalence(rng, len(PLANTED_TOPICS))
    p = [prev.at(i) for i in range(0, 200_000, 1_000)]
    for q in p:
        assert q.shape == (len(PLANTED_TOPICS),)
        assert np.all(q > 0)
        assert q.sum() == pytest.approx(1.0)
    tv = max(0.5 * np.abs(q - p[0]).sum() for q in p)
    assert tv > 0.1, "prevalence moves like a news cycle"
    # ... and the moves show up in the labels: the label shares of two distant windows differ.
    with_drift = [a["label"] for a in generate_articles(60_000, seed=4)]
    first, last = Counter(with_drift[:10_000]), Counter(with_drift[-10_000:])
    assert sum(abs(first[k] - last[k]) for k in PLANTED_TOPICS) / 2 / 10_000 > 0.05


def test_without_drift_label_shares_are_stable() -> None:
    labels = [a["label"] for a in generate_articles(20_000, seed=4, drift=False)]
    first, last = Counter(labels[:10_000]), Counter(labels[10_000:])
    assert sum(abs(first[k] - last[k]) for k in PLANTED_TOPICS) / 2 / 10_000 < 0.04


def test_main_prints_jsonl() -> None:
    buf = io.StringIO()
    with redirect_stdout(buf):
        generator.main(["3", "9"])
    lines = buf.getvalue().splitlines()
    assert [json.loads(x) for x in lines] == list(generate_articles(3, seed=9))
