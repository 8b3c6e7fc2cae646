"""The online HDP's φ̂ spreads η over the vocabulary the stream uses, not over the slots it could hold.

A service sizes the kernel for a vocabulary capacity (65,536 slots) that a narrow stream fills only in part; with
the capacity in φ̂'s denominator an empty topic explains a word with 1/W and births all but stop (the demo stream's
16 planted topics fell into 5 muddled ones). These tests hold :func:`kernels.ohdp.estimated_vocabulary` to Chao's
estimator and the model to the same topics whatever the capacity.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from benchmarks.hdp_truncation import planted_recovery
from evaluation.corpus import iter_batches
from kernels.hygiene import mass_topics
from kernels.ohdp import OnlineHDP, estimated_vocabulary


def _chao1(words: list[int]) -> float:
    """Chao (1984) from a list of token ids, counted the obvious way."""
    freq = Counter(Counter(words).values())
    seen = len(set(words))
    f1, f2 = freq.get(1, 0), freq.get(2, 0)
    return seen + (f1 * f1 / (2 * f2) if f2 else f1 * (f1 - 1) / 2)


def test_estimate_is_chao1_of_the_token_counts() -> None:
    rng = np.random.default_rng(0)
    words = rng.zipf(1.3, 4000) % 5000
    tokens = np.bincount(words, minlength=20_000).astype(np.float64)
    assert estimated_vocabulary(tokens) == round(_chao1(words.tolist()))


def test_estimate_is_nearer_the_true_vocabulary_than_the_words_seen() -> None:
    """A sample of 3,000 tokens from 2,000 equally likely words shows about 1,550 of them; the estimate lies
    between that and the truth, and nearer the truth."""
    rng = np.random.default_rng(1)
    tokens = np.bincount(rng.integers(0, 2000, 3000), minlength=65_536).astype(np.float64)
    seen = int(np.count_nonzero(tokens))
    est = estimated_vocabulary(tokens)
    assert seen < est <= 2200
    assert abs(est - 2000) < abs(seen - 2000) / 3


def test_a_few_repeated_words_estimate_themselves_and_the_capacity_caps() -> None:
    tokens = np.zeros(65_536)
    tokens[:700] = 40.0
    assert estimated_vocabulary(tokens) == 700
    assert estimated_vocabulary(np.ones(50)) == 50  # 50 singletons, f2 = 0: f1(f1 − 1)/2 capped at 50 slots
    assert estimated_vocabulary(np.zeros(10)) == 1


def test_the_capacity_does_not_change_the_topics_of_a_narrow_stream(
    generator_stream: tuple[Any, np.ndarray], generator_hdp: OnlineHDP
) -> None:
    """The demo generator's 682 words learned in their exact vocabulary and in a service's 65,536 slots: about the
    same number of topics holds 95 % of the mass (± 10 %: 41 and 40 with plain document sweeps, 35 and 38 with the
    over-relaxed ones) and as many planted topics are recovered (± 1). With the capacity in φ̂'s denominator the
    65,536-slot model kept 4 topics and recovered none of the 16."""
    corpus, truth = generator_stream
    wide = OnlineHDP(150, 65_536, seed=0, window=corpus.train.n_docs)
    for batch in iter_batches(corpus.train, 256):
        wide.partial_fit(batch)
    found = {}
    for model in (generator_hdp, wide):  # the exact vocabulary (the shared fit), then the capacity
        W = int(model.n_words)
        padded = np.zeros((truth.shape[0], W))
        padded[:, : truth.shape[1]] = truth
        found[W] = (
            mass_topics(model.topic_weights(), 0.95),
            planted_recovery(model.topic_word(), model.topic_weights(), padded)["recovered"],
        )
    (n_exact, rec_exact), (n_cap, rec_cap) = found[corpus.n_words], found[65_536]
    assert abs(n_cap - n_exact) <= 0.1 * max(n_cap, n_exact), found
    assert rec_cap >= rec_exact - 1 and rec_cap >= 14, found


def test_token_counts_are_state_and_reset_with_their_slots() -> None:
    rng = np.random.default_rng(2)
    docs = [(rng.choice(300, 12, replace=False), rng.integers(1, 4, 12).astype(np.float64)) for _ in range(40)]
    model = OnlineHDP(10, 1000, seed=0, batch_size=8, window=40)
    model.partial_fit(docs)
    expected = np.zeros(1000)
    for ids, counts in docs:
        expected[ids] += counts
    np.testing.assert_array_equal(model.word_tokens_, expected)
    model.transform(docs[:5])  # inference learns nothing, counts nothing
    np.testing.assert_array_equal(model.word_tokens_, expected)
    restored = OnlineHDP.from_state(model.state_dict())
    np.testing.assert_array_equal(restored.word_tokens_, expected)
    model.reset_words(docs[0][0])
    expected[docs[0][0]] = 0.0
    np.testing.assert_array_equal(model.word_tokens_, expected)


def test_a_snapshot_without_token_counts_counts_the_slots_with_statistics() -> None:
    """Counts unknown: each slot holding statistics counts as seen more than twice (V = the slots seen)."""
    rng = np.random.default_rng(3)
    docs = [(rng.choice(300, 12, replace=False), np.full(12, 2.0)) for _ in range(40)]
    model = OnlineHDP(10, 1000, seed=0, batch_size=8, window=40)
    model.partial_fit(docs)
    state = model.state_dict()
    del state["state"]["word_tokens"]
    old = OnlineHDP.from_state(state)
    assert old._vocab() == int(np.count_nonzero(model.topic_stat_.any(axis=1)))
