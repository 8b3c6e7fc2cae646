"""Synthetic news articles for offline runs (``make run`` with no internet, demos, tests).

The project ships no third-party text, so this module plants its own topics: ~15 news desks, each a list of
characteristic English words (a few general words are shared between related desks, so topics overlap the way
real ones do), plus headline templates. Articles are generated the way LDA assumes text is generated:

1. pick 1–3 topics, with probabilities given by each topic's *current prevalence*;
2. draw the article's mixture over those topics from a Dirichlet;
3. draw the article's length, then each token from the background words (general news vocabulary and function
   words) with a small probability, otherwise from a topic of the mixture, each topic's words following a
   Zipf-like law (the first words of a list are its most frequent).

Prevalence drifts like a news cycle: each topic's weight rises and falls on its own slow sine wave, and now
and then a topic gets a burst of "breaking news" that decays over the next few thousand articles. The lag,
prevalence and drift panels of the dashboard therefore move while the demo runs.

``label`` is the name of the topic with the largest weight in the article's mixture; it is never used for
learning, only by ``topicstream eval`` (NMI) and by tests.

Deterministic for a seed: the same ``(n, seed, start)`` gives the same articles, including ids and timestamps.
Fast: well above 5,000 articles per second on one core (numpy draws, one string join per article).

>>> arts = list(generate_articles(2, seed=1))
>>> [a["source"] for a in arts], arts[0]["label"] in PLANTED_TOPICS
(['generator', 'generator'], True)
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from importlib.resources import files
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BACKGROUND_WORDS",
    "DEFAULT_START",
    "PLANTED_TOPICS",
    "TITLE_TEMPLATES",
    "generate_articles",
    "planted_distributions",
]

# ------------------------------------------------------------------------------------------------ the words
# Every word is lower-case letters only, at least 3 letters long and not an English stop word, so that the
# tokenizer (service.text.Tokenizer) keeps all of them. Words shared by several desks are deliberate. They are
# data, in newsroom.json beside this module.
_NEWSROOM = json.loads(files(__package__).joinpath("newsroom.json").read_text(encoding="utf-8"))
#: Desk → its words, most frequent first (Zipf weights ``_ZIPF_S``): the planted topics.
PLANTED_TOPICS: dict[str, list[str]] = _NEWSROOM["planted_topics"]
#: General news vocabulary plus function words (repeated to weigh more): function words make the text read like
#: text and are dropped by the tokenizer (stop words); the content words are the background a topic model has to
#: absorb.
BACKGROUND_WORDS: list[str] = _NEWSROOM["background_words"]
#: Headline templates per desk: {a}, {b}, {c} are drawn from the dominant desk's words ({A} etc. capitalised).
TITLE_TEMPLATES: dict[str, list[str]] = _NEWSROOM["title_templates"]
_GENERIC_TITLES: list[str] = _NEWSROOM["generic_titles"]

DEFAULT_START = datetime(2025, 1, 1, tzinfo=timezone.utc)
"""First ``published_at`` when ``start`` is not given (fixed, so that a seed fully determines the output)."""

# ------------------------------------------------------------------------------------------------ the process
_N_TOPICS_P = (0.45, 0.40, 0.15)  # articles about 1, 2 or 3 topics
_MIX_ALPHA = 0.6  # Dirichlet concentration of an article's mixture over its chosen topics
_BACKGROUND_P = (0.12, 0.30)  # share of background tokens per article, uniform in this range
_ZIPF_S = 0.8  # exponent of the within-topic word frequencies
_MIN_WORDS, _MEAN_WORDS = 60, 140  # article length in tokens: 60 + Poisson(80)
_SENTENCE_WORDS = 12  # mean sentence length (geometric)
_SECONDS_PER_ARTICLE = 6.0  # mean simulated gap between published_at timestamps (14,400 articles a day)
_CYCLE_ARTICLES = (40_000, 160_000)  # period of a topic's news cycle, in articles
_CYCLE_AMPLITUDE = 0.6  # relative swing of a topic's prevalence over its cycle
_BURST_EVERY = 30_000  # mean articles between breaking-news bursts
_BURST_DECAY = 6_000  # articles for a burst to fade by e
_BURST_SIZE = (1.5, 4.0)  # a burst multiplies the topic's base weight by 1 + this (uniform)
_BLOCK = 64  # articles drawn together (vectorised); prevalence is recomputed once per block
_TABLE = 4096  # resolution of the word-sampling tables (probabilities are quantised to 1/_TABLE)


class _Model:
    """The planted topics as numpy sampling tables over one global word list.

    Row 0 of :attr:`table` samples background words (uniformly over :data:`BACKGROUND_WORDS`, repeats
    count), row ``1 + k`` samples topic ``k``'s words with Zipf-like frequencies:
    ``table[r, floor(u * _TABLE)]`` for a uniform ``u`` is a word id. :attr:`forms` holds four spellings of
    every word (plain, capitalised, each with and without a full stop), indexed ``form * n_words + word_id``.
    """

    def __init__(self) -> None:
        self.names = list(PLANTED_TOPICS)
        words: list[str] = []
        index: dict[str, int] = {}
        for w in [*BACKGROUND_WORDS, *(w for ws in PLANTED_TOPICS.values() for w in ws)]:
            if w not in index:
                index[w] = len(words)
                words.append(w)
        self.words = words
        self.n_words = len(words)
        self.forms = (
            words + [w.capitalize() for w in words] + [w + "." for w in words] + [w.capitalize() + "." for w in words]
        )
        centres = (np.arange(_TABLE) + 0.5) / _TABLE
        rows = [np.array([index[w] for w in BACKGROUND_WORDS])[(centres * len(BACKGROUND_WORDS)).astype(np.int64)]]
        for name in self.names:
            ids = np.array([index[w] for w in PLANTED_TOPICS[name]], dtype=np.int64)
            p = 1.0 / np.arange(1, len(ids) + 1) ** _ZIPF_S
            cdf = np.cumsum(p / p.sum())
            rows.append(ids[np.minimum(np.searchsorted(cdf, centres, side="right"), len(ids) - 1)])
        self.table = np.stack(rows).astype(np.int64)
        self.titles = [TITLE_TEMPLATES.get(n, []) + _GENERIC_TITLES for n in self.names]


_MODEL: _Model | None = None


def _model() -> _Model:
    global _MODEL
    if _MODEL is None:
        _MODEL = _Model()
    return _MODEL


class _Prevalence:
    """Time-varying topic prevalence: a slow sine per topic plus decaying breaking-news bursts."""

    def __init__(self, rng: np.random.Generator, k: int) -> None:
        self.rng = rng
        self.base = rng.dirichlet(np.full(k, 8.0))  # uneven but no topic is negligible
        self.period = rng.uniform(*_CYCLE_ARTICLES, size=k)
        self.phase = rng.uniform(0.0, 2.0 * math.pi, size=k)
        self.burst_topic = -1
        self.burst_at = 0
        self.burst_size = 0.0
        self.next_burst = int(rng.exponential(_BURST_EVERY))

    def at(self, i: int) -> np.ndarray:
        """Prevalence of every topic at article index ``i`` (call with non-decreasing ``i``)."""
        if i >= self.next_burst:
            self.burst_topic = int(self.rng.integers(len(self.base)))
            self.burst_at = i
            self.burst_size = float(self.rng.uniform(*_BURST_SIZE))
            self.next_burst = i + 1 + int(self.rng.exponential(_BURST_EVERY))
        w = self.base * (1.0 + _CYCLE_AMPLITUDE * np.sin(2.0 * math.pi * i / self.period + self.phase))
        if self.burst_topic >= 0:
            decay = math.exp(-(i - self.burst_at) / _BURST_DECAY)
            w[self.burst_topic] += self.base[self.burst_topic] * self.burst_size * decay
        return w / w.sum()


def _rfc3339(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def planted_distributions(vocab: Sequence[str], *, background: bool = False) -> NDArray[np.float64]:
    """The word distributions the generator draws from, over ``vocab`` (a tokenized corpus's words): one row per
    desk (its words with Zipf weights ``_ZIPF_S``, most frequent first) and, with ``background``, a last row for
    the background words (repeats counted). Words missing from ``vocab`` are left out and each row renormalised;
    tests and benchmarks match learned topics against these rows."""
    index = {w: i for i, w in enumerate(vocab)}
    rows = []
    for words in PLANTED_TOPICS.values():
        p = np.zeros(len(vocab))
        for w, q in zip(words, 1.0 / np.arange(1, len(words) + 1) ** _ZIPF_S, strict=True):
            if w in index:
                p[index[w]] += q
        rows.append(p / p.sum())
    if background:
        bg = np.zeros(len(vocab))
        for w in BACKGROUND_WORDS:
            if w in index:
                bg[index[w]] += 1.0
        rows.append(bg / bg.sum())
    return np.array(rows)


def generate_articles(
    n: int | None, seed: int = 0, start: datetime | None = None, *, drift: bool = True
) -> Iterator[dict[str, Any]]:
    """Yield ``n`` synthetic articles (``None``: endlessly) as input-event dicts.

    Parameters
    ----------
    n : number of articles, or ``None`` for an endless stream.
    seed : everything (topics chosen, words, ids, timestamps, drift) is a function of the seed.
    start : ``published_at`` of the first article (naive datetimes are taken as UTC); default
        :data:`DEFAULT_START`. Later articles follow at random gaps of about 6 simulated seconds. A live
        producer passes ``datetime.now(timezone.utc)``.
    drift : let topic prevalence follow news cycles and bursts (``False``: fixed prevalence).

    Each dict has ``id`` (``gen-<seed>-<index>``), ``title``, ``text``, ``source="generator"``,
    ``language="en"``, ``published_at`` (RFC 3339, UTC) and ``label`` (the dominant planted topic's name). The
    first ``m`` articles of ``generate_articles(n, seed)`` do not depend on ``n``.
    """
    if n is not None and n < 0:
        raise ValueError(f"n must be >= 0 or None, got {n}")
    m = _model()
    rng = np.random.default_rng(seed)
    k = len(m.names)
    prevalence = _Prevalence(rng, k)
    fixed_p = prevalence.base
    t = start if start is not None else DEFAULT_START
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    n_topics_cdf = np.cumsum(_N_TOPICS_P)
    max_topics = len(_N_TOPICS_P)
    cols = np.arange(max_topics)
    forms, names, table, titles = m.forms, m.names, m.table, m.titles
    i = 0
    while n is None or i < n:
        size = _BLOCK
        p = prevalence.at(i) if drift else fixed_p
        # 1. topics (without replacement, proportional to p: Gumbel top-k) and the mixture over them
        n_doc_topics = 1 + np.minimum(np.searchsorted(n_topics_cdf, rng.random(size)), max_topics - 1)
        keys = np.log(p) + rng.gumbel(size=(size, k))
        chosen = np.argsort(-keys, axis=1)[:, :max_topics]
        active = cols < n_doc_topics[:, None]
        weights = rng.standard_gamma(_MIX_ALPHA, size=(size, max_topics)) * active
        weights[~active.any(axis=1) | (weights.sum(axis=1) <= 0), 0] = 1.0  # all-zero gammas: keep one topic
        weights /= weights.sum(axis=1, keepdims=True)
        dominant = chosen[np.arange(size), np.argmax(weights, axis=1)]
        # 2. token counts: background share b, the rest split over the topics by the mixture
        lengths = _MIN_WORDS + rng.poisson(_MEAN_WORDS - _MIN_WORDS, size=size)
        b = rng.uniform(*_BACKGROUND_P, size=size)
        pvals = np.concatenate([b[:, None], (1.0 - b)[:, None] * weights], axis=1)
        counts = rng.multinomial(lengths, pvals)  # (size, 1 + max_topics)
        # 3. each token's table row (0 = background, 1 + k = topic k), its word; shuffle within each article
        rows = np.concatenate([np.zeros((size, 1), dtype=np.int64), 1 + chosen], axis=1)
        tok_rows = np.repeat(rows.ravel(), counts.ravel())
        tok_words = table[tok_rows, rng.integers(_TABLE, size=tok_rows.size)]
        tok_doc = np.repeat(np.arange(size), lengths)
        order = np.argsort(tok_doc + rng.random(tok_rows.size), kind="stable")
        tok_words = tok_words[order]
        # 4. spelling: sentences of geometric length, capitalised and full-stopped
        ends = np.cumsum(lengths)
        last = rng.random(tok_rows.size) < 1.0 / _SENTENCE_WORDS
        last[ends - 1] = True
        first = np.empty_like(last)
        first[0] = True
        first[1:] = last[:-1]
        tok_forms = (tok_words + m.n_words * (first + 2 * last)).tolist()
        # 5. headline words, template choice and timestamps
        head = table[1 + dominant[:, None], rng.integers(_TABLE, size=(size, 3))].tolist()
        template_u = rng.random(size).tolist()
        gaps = rng.exponential(_SECONDS_PER_ARTICLE, size=size).tolist()
        dominant_l, starts = dominant.tolist(), (ends - lengths).tolist()
        for j in range(size):
            if n is not None and i >= n:
                return
            d = dominant_l[j]
            a, bb, c = head[j]
            templ = titles[d][int(template_u[j] * len(titles[d]))]
            title = templ.format(
                a=forms[a],
                b=forms[bb],
                c=forms[c],
                A=forms[m.n_words + a],
                B=forms[m.n_words + bb],
                C=forms[m.n_words + c],
            )
            yield {
                "id": f"gen-{seed}-{i:09d}",
                "title": title,
                "text": " ".join(map(forms.__getitem__, tok_forms[starts[j] : ends[j]])),
                "source": "generator",
                "language": "en",
                "published_at": _rfc3339(t),
                "label": names[d],
            }
            t += timedelta(seconds=gaps[j])
            i += 1


def main(argv: list[str] | None = None) -> None:
    """``python -m service.dev.generator [N] [SEED]``: print N (default 10) articles as JSONL."""
    args = sys.argv[1:] if argv is None else argv
    n = int(args[0]) if args else 10
    seed = int(args[1]) if len(args) > 1 else 0
    out = sys.stdout
    for art in generate_articles(n, seed=seed):
        out.write(json.dumps(art, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
