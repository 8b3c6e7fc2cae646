"""Co-occurrence merges (kernels/_cooccur.py): topics that the same documents use together are merged.

Checked against a slow search that recomputes NumPy's correlation matrix from scratch after every merge, and on
the collapsed HDP's splinters of planted block topics (η = 0.01 over W = 240 words over-splits them,
docs/ohdp.md): the merges join parts of one planted topic, never two planted topics.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from kernels import Batch
from kernels._cooccur import correlated_merges
from kernels.hygiene import TopicHygiene, hellinger_matrix, mass_topics
from kernels.ohdp import OnlineHDP
from tests.synthetic import block_topics_corpus


class FixedMixtures:
    """A stand-in kernel whose ``transform`` returns given proportions: what :func:`correlated_merges` reads of a
    model, and a record of the merges it asks for."""

    n_docs_seen_ = 10_000

    def __init__(self, theta: NDArray[np.float64], weights: NDArray[np.float64]) -> None:
        self.theta, self.weights = theta, weights
        self.n_topics, self.n_words = theta.shape[1], 5
        self.merges: list[tuple[int, int]] = []

    def topic_word(self) -> NDArray[np.float64]:
        return np.full((self.n_topics, self.n_words), 1.0 / self.n_words)

    def topic_weights(self) -> NDArray[np.float64]:
        return self.weights

    def transform(self, docs: Batch) -> NDArray[np.float64]:
        return self.theta

    def merge_topics(self, into: int, src: int) -> None:
        self.merges.append((src, into))

    def delete_topic(self, k: int) -> None:
        raise AssertionError("not a merge")

    def birth_topic(
        self, k: int, word_ids: ArrayLike, word_probs: ArrayLike, share: float
    ) -> tuple[float, Callable[[], None]]:
        raise AssertionError("not a merge")

    def split_topic(
        self, k: int, j: int, word_ids: ArrayLike, fractions: ArrayLike, rest: float
    ) -> tuple[float, Callable[[], None]]:
        raise AssertionError("not a merge")


def naive_merges(
    theta: NDArray[np.float64], weights: NDArray[np.float64], threshold: float, min_docs: float
) -> list[tuple[int, int]]:
    """The same rule, slowly: all pairs' ``np.corrcoef`` afresh after each merge; the smaller into the larger."""
    cols = {k: theta[:, k].copy() for k in range(theta.shape[1]) if theta[:, k].sum() >= min_docs}
    w = weights.astype(np.float64).copy()
    merges = []
    while True:
        best = None
        for a in sorted(cols):
            for b in sorted(cols):
                if a < b:
                    c = np.corrcoef(cols[a], cols[b])[0, 1]
                    if c > threshold and (best is None or c > best[0]):
                        best = (c, a, b)
        if best is None:
            return merges
        _, a, b = best
        if w[a] < w[b]:
            a, b = b, a
        merges.append((b, a))
        cols[a] = cols[a] + cols.pop(b)
        w[a] += w[b]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merges_match_the_naive_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.dirichlet(np.full(5, 0.3), size=300)
    # topics 5 and 6 are splinters of 0 and 3 (they rise and fall with them), 7 holds almost nothing
    theta = np.column_stack(
        [base, 0.6 * base[:, 0] + 0.05 * rng.random(300), 0.4 * base[:, 3] + 0.05 * rng.random(300), 1e-5 * base[:, 1]]
    )
    theta /= theta.sum(axis=1, keepdims=True)
    weights = theta.mean(axis=0)
    model = FixedMixtures(theta, weights)
    docs = Batch.from_docs([(np.array([0]), np.array([1.0]))] * 300)
    events = correlated_merges(model, docs, threshold=0.3, empty_below=1e-9, min_docs=2.0, limit=10)
    assert model.merges == naive_merges(theta, weights, 0.3, 2.0)
    assert {(5, 0), (6, 3)} <= set(model.merges)  # the planted splinters go into their topics
    assert all(7 not in pair for pair in model.merges)  # the near-empty topic takes no part
    assert [(e.topics[0], e.into) for e in events] == model.merges and all(e.kind == "merge" for e in events)


def test_limit_bounds_the_merges() -> None:
    rng = np.random.default_rng(3)
    base = rng.random((100, 1))
    theta = np.hstack([base + 0.01 * rng.random((100, 1)) for _ in range(6)])
    model = FixedMixtures(theta, np.full(6, 1 / 6))
    docs = Batch.from_docs([(np.array([0]), np.array([1.0]))] * 100)
    assert len(correlated_merges(model, docs, threshold=0.3, empty_below=1e-9, min_docs=0.0, limit=2)) == 2


def test_splinters_of_planted_topics_are_merged_and_planted_topics_are_not() -> None:
    """The collapsed HDP over-splits 8 block topics at η = 0.01; co-occurrence merges alone (no merges by
    distance, no births) join splinters of one planted topic only, and bring the count toward 8."""
    truth, docs = block_topics_corpus(seed=0, n_docs=2000)
    model = OnlineHDP(50, truth.shape[1], seed=0, window=len(docs), eta=0.01, batch_size=100)
    for i in range(0, len(docs), 100):
        model.partial_fit(Batch.from_docs(docs[i : i + 100]))
    before = mass_topics(model.topic_weights())
    planted_of = hellinger_matrix(np.vstack([truth, model.topic_word()]))[: len(truth), len(truth) :].argmin(axis=0)
    # max_merges: room for every splinter pair (measured: 19 merges, none across planted topics; at a threshold
    # of 0.1, 24 merges, 2 of them across)
    hygiene = TopicHygiene(threshold=1e-9, max_births=0, warmup_docs=0, merge_correlation=0.3, max_merges=40)
    events = hygiene.apply(model, Batch.from_docs(docs[-500:]))
    assert before > 8 + 2  # the splinters this move is for
    assert events and all(e.kind == "merge" for e in events)
    assert all(planted_of[e.topics[0]] == planted_of[e.into] for e in events)
    after = mass_topics(model.topic_weights())
    assert after < before and abs(after - 8) < abs(before - 8)


def test_off_by_default_and_checked() -> None:
    assert TopicHygiene().merge_correlation is None
    with pytest.raises(ValueError, match="merge_correlation"):
        TopicHygiene(merge_correlation=1.0)
    assert OnlineHDP.hygiene_defaults is not None and OnlineHDP.hygiene_defaults["merge_correlation"] == 0.3


def test_the_same_proportions_in_every_document_correlate_nothing() -> None:
    """Copies of one document, or documents without words (the online HDP's prior mixture): every column of θ is
    one value repeated, whose mean differs from it by rounding; the ±1e-17 left over, scaled to unit norm,
    correlated ±1 with every other such column and merged unrelated topics."""
    weights = np.array([0.088, 0.075, 0.121, 0.089, 0.111, 0.102, 0.109, 0.118, 0.1, 0.087])
    theta = np.tile(weights / weights.sum(), (1024, 1))
    model = FixedMixtures(theta, weights)
    events = correlated_merges(model, Batch.from_docs([([0], [1.0])] * 1024), threshold=0.3, empty_below=1e-3,
                               min_docs=2.0, limit=10)  # fmt: skip
    assert events == [] and model.merges == []
