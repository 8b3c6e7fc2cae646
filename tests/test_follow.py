"""Words → topics (service.follow) on a summary whose topics are the generator's planted desks."""

from __future__ import annotations

import random

import pytest

from service.dev.generator import PLANTED_TOPICS
from service.follow import query_words, resolve, score_topic


def planted_summary(seed: int = 0, n_words: int = 10) -> tuple[dict, dict[str, int]]:
    """A summary like the learner's: each planted desk is a topic (ids shuffled), its first words on top."""
    rng = random.Random(seed)
    desks = list(PLANTED_TOPICS)
    ids = list(range(len(desks)))
    rng.shuffle(ids)
    topic_of = dict(zip(desks, ids, strict=True))
    topics = [
        {"topic": topic_of[d], "prevalence": 1 / len(desks), "drift": 0.0, "top_words": PLANTED_TOPICS[d][:n_words]}
        for d in desks
    ]
    return {"version": 3, "topics": sorted(topics, key=lambda t: t["topic"])}, topic_of


@pytest.mark.parametrize(
    ("words", "desk"),
    [
        ("oil opec", "energy"),
        ("Elections", "elections"),
        ("the striker scored a goal", "football"),
        ("inflation rates", "central_banks"),
        ("NASA rocket launches", "space"),
    ],
)
def test_the_planted_topic_ranks_first(words: str, desk: str) -> None:
    summary, topic_of = planted_summary()
    matches = resolve(summary, words)
    assert matches and matches[0].topic == topic_of[desk], [(m.topic, m.matched) for m in matches]


def test_a_topic_with_every_word_beats_one_with_some() -> None:
    summary = {
        "topics": [
            {"topic": 0, "prevalence": 0.5, "top_words": ["oil", "stocks", "shares"]},
            {"topic": 1, "prevalence": 0.1, "top_words": ["gas", "opec", "oil"]},
        ]
    }
    matches = resolve(summary, "oil opec")
    assert [m.topic for m in matches] == [1, 0]
    assert matches[0].matched == ["opec", "oil"]


def test_rank_matters_and_ties_go_to_the_more_prevalent() -> None:
    top, low = score_topic(["oil"], ["oil", "gas"]), score_topic(["oil"], ["gas", "crude", "oil"])
    assert top[0] == 1.0 and 0 < low[0] < top[0]
    summary = {
        "topics": [
            {"topic": 0, "prevalence": 0.1, "top_words": ["oil"]},
            {"topic": 1, "prevalence": 0.3, "top_words": ["oil"]},
            {"topic": 2, "prevalence": 0.0001, "top_words": ["oil"]},  # hardly used: left out
        ]
    }
    assert [m.topic for m in resolve(summary, "oil")] == [1, 0]
    assert [m.topic for m in resolve(summary, "oil", max_topics=1)] == [1]


def test_names_count_as_words() -> None:
    summary = {
        "topics": [
            {"topic": 0, "prevalence": 0.2, "top_words": ["crude", "barrel", "brent"]},
            {"topic": 1, "prevalence": 0.2, "top_words": ["stocks", "prices", "oil"]},
        ]
    }
    matches = resolve(summary, "oil prices", names={0: "Oil prices"})
    assert matches[0].topic == 0 and matches[0].name == "Oil prices"


def test_no_match_and_bad_queries() -> None:
    summary, _ = planted_summary()
    assert resolve(summary, "zebra") == []
    with pytest.raises(ValueError, match="no usable word"):
        query_words("the of a")
    assert query_words("Oil, OIL and opec") == ["oil", "opec"]
    assert query_words("हिन्दी समाचार İstanbul") == [
        "हिन्दी",
        "समाचार",
        "istanbul",
    ]  # as articles split them (İ lower-cased to i)
    with pytest.raises(ValueError):
        resolve(summary, "oil", max_topics=0)
