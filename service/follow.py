"""Which topics a few words mean: ``topicstream subscribe --words "oil opec"`` (pure scoring, no I/O).

The words are tokenized like articles (:class:`service.text.Tokenizer`) and compared with each topic's top words
from the snapshot summary (most probable first) and with the name people gave it (:mod:`service.names`). A query
word that is a topic's word of rank r (0 = most probable) scores 1 / log2(r + 2), the discount of ranked
retrieval (DCG): 1 for the top word, 0.5 for the third, 0.29 for the tenth; a word of the topic's name scores 1.
Words match when equal or equal after dropping a plural ending ("elections" ~ "election"). A topic's score is
the mean over the query words of their best score, so a topic that has every query word beats one that has
some. Topics hardly used (prevalence below ``min_prevalence``) are left out: their top words are noise.

The chosen topics are those scoring at least ``min_share`` of the best score, at most ``max_topics``, best first
(ties: the more prevalent first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .text import Tokenizer

__all__ = ["Match", "query_words", "resolve", "score_topic"]

_TOKENIZER = Tokenizer()


@dataclass(frozen=True)
class Match:
    """A topic chosen for a query."""

    topic: int
    score: float
    prevalence: float
    top_words: list[str]
    matched: list[str]  # the topic's words (or name words) that matched
    name: str | None = None


def _stem(word: str) -> str:
    """Drop an English plural ending: enough to match "elections" with "election", "prices" with "price"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def query_words(text: str) -> list[str]:
    """The distinct words of a query, tokenized like articles; raises ValueError when none is left."""
    words = list(dict.fromkeys(_TOKENIZER(text)))
    if not words:
        raise ValueError(f"no usable word in {text!r} (words of 3+ letters that are not stop words)")
    return words


def score_topic(query: list[str], top_words: list[str], name: str | None = None) -> tuple[float, list[str]]:
    """``(score, matched words)`` of one topic for tokenized ``query`` words (see the module docstring)."""
    best: dict[str, float] = {}
    matched: list[str] = []
    stems = [_stem(q) for q in query]
    name_words = {_stem(w) for w in _TOKENIZER(name)} if name else set()
    for rank, word in enumerate(top_words):
        s = _stem(word)
        for q, qs in zip(query, stems, strict=True):
            if s == qs:
                gain = 1.0 / math.log2(rank + 2)
                if gain > best.get(q, 0.0):
                    best[q] = gain
                if word not in matched:
                    matched.append(word)
    for q, qs in zip(query, stems, strict=True):
        if qs in name_words:
            best[q] = 1.0
            if f"name:{q}" not in matched:
                matched.append(f"name:{q}")
    return sum(best.values()) / len(query), matched


def resolve(
    summary: Mapping[str, Any],
    words: str,
    names: Mapping[int, str] | None = None,
    *,
    max_topics: int = 3,
    min_share: float = 0.5,
    min_prevalence: float = 0.001,
) -> list[Match]:
    """The topics of ``summary`` (``P:summary``: ``topics`` with ``topic``, ``prevalence``, ``top_words``) that
    ``words`` mean, best first; empty when no topic has any of the words."""
    if max_topics < 1 or not 0 < min_share <= 1:
        raise ValueError("need max_topics >= 1 and 0 < min_share <= 1")
    query = query_words(words)
    names = names or {}
    scored: list[Match] = []
    for t in summary.get("topics", []):
        k, prevalence = int(t["topic"]), float(t["prevalence"])
        if prevalence < min_prevalence:
            continue
        top = list(t.get("top_words") or [])
        score, matched = score_topic(query, top, names.get(k))
        if score > 0:
            scored.append(Match(k, score, prevalence, top, matched, names.get(k)))
    scored.sort(key=lambda m: (-m.score, -m.prevalence, m.topic))
    if not scored:
        return []
    floor = min_share * scored[0].score
    return [m for m in scored if m.score >= floor][:max_topics]
