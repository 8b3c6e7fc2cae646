"""Co-occurrence merges: two topics that the same documents use together are one topic split in two.

A one-pass collapsed model splits topics. In the collapsed HDP (:mod:`kernels.ohdp`) a word that a young topic has
not seen yet gets φ̂ = η/(N_k + Vη) there and 1/V in an empty topic, so the unseen words of a document open a new
topic beside the one that explains its seen words; the two then share the same documents from that moment on. Such
*splinters* need not look alike: on an LDA-drawn corpus they split a planted topic's words into complementary
halves (Hellinger 0.45–0.69 apart, far above any duplicate threshold), on the demo generator's stream they are
near-copies (0.21–0.6). What gives them away is the documents: under the model a document's topic proportions are
Dirichlet, whose components are *negatively* correlated (Cov(θ_k, θ_l) = −a_k a_l / (a²(a + 1)), a = Σ a_k), so two
topics whose proportions rise and fall together across documents are not two topics of the model.

Measured on one pass of :class:`kernels.OnlineHDP` (T = 150; correlation of the columns of θ inferred for the
last 1,024 training documents; ``docs/ohdp.md``, "Splinters, and the co-occurrence merge"): every pair correlated
above 0.3 was two parts of one planted topic (generator: 35 such pairs; LDA-drawn: 61), and no pair of parts of
different planted topics correlated above 0.14 (generator) or 0.24 (LDA-drawn). On BBC News, where topics are not
planted, the most correlated pairs (0.3–0.46) are parts of one subject ("labour election blair" with "brown
chancellor gordon"; "music radio band" with "album rock hip hop").

Hughes & Sudderth's merges (bnpy) are accepted on the whole-data objective; the plug-in collapsed objective
cannot be used here: the expected counts of a CVB0 model give every topic a sliver of every document, and with
them the document term of log p(w, z) favours merging any two topics (measured: 5,242 of the LDA-drawn corpus's
5,322 pairs of different planted topics).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ._batch import Batch
from ._events import Event, SupportsTopicMoves
from ._moves import swap_for_merge

__all__ = ["CORRELATION_MIN_DOCS", "correlated_merges", "pair_correlations"]

#: Documents' worth of θ (Σ_d θ_dk over the documents scored) a topic needs for its proportions to count in a
#: correlation: the co-occurrence merge's ``min_docs`` as topic hygiene passes it, and the near merge's.
CORRELATION_MIN_DOCS = 2.0


def _standardised(columns: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each column centred and scaled to unit norm (a constant column becomes zeros), so that Z.T @ Z is the matrix
    of Pearson correlations. A column is constant when its spread is at the rounding of its values: the mean of n
    equal values is not always that value, and the ±1e-17 left over, scaled to unit norm, correlated ±1 with every
    other such column (copies of one document in the window merged unrelated topics)."""
    mean = columns.mean(axis=0)
    z = columns - mean
    norm = np.sqrt((z * z).sum(axis=0))
    rounding = 1e-9 * np.sqrt(columns.shape[0]) * np.abs(columns).max(axis=0, initial=0.0)
    return np.divide(z, norm, out=np.zeros_like(z), where=norm > rounding)


def pair_correlations(theta: NDArray[np.float64], min_docs: float) -> NDArray[np.float64]:
    """Pearson correlations of the columns of ``theta`` (documents × topics), −inf on the diagonal and for every
    topic holding fewer than ``min_docs`` documents' worth (Σ_d θ_dk): a near-empty topic's proportions are noise,
    and such a topic correlates perfectly with whatever its few tokens came from."""
    z = _standardised(theta)
    corr = z.T @ z
    small = theta.sum(axis=0) < min_docs
    corr[small, :] = -np.inf
    corr[:, small] = -np.inf
    np.fill_diagonal(corr, -np.inf)
    return corr


def correlated_merges(
    model: SupportsTopicMoves,
    docs: Batch,
    *,
    threshold: float,
    empty_below: float,
    min_docs: float,
    limit: int,
    keep: int | None = None,
) -> list[Event]:
    """Merge the live topics whose proportions in ``docs`` correlate above ``threshold``, most correlated first.

    θ = ``model.transform(docs)``; a topic takes part when it is live (weight ≥ ``empty_below``) and holds at least
    ``min_docs`` documents' worth of θ (Σ_d θ_dk): the proportions of a near-empty topic are noise, and such topics
    correlate perfectly with whatever their few tokens came from. The smaller topic goes into the larger (which
    keeps its id); the merged topic's proportions are the sum of the two, and its correlations with the others are
    recomputed before the next pair is chosen. At most ``limit`` merges. Each event's score is the Hellinger
    distance of the pair (the merged topic's word distribution is the weight-averaged mixture of the two), as for
    merges by distance.
    """
    weights = model.topic_weights().copy()
    live = np.flatnonzero(weights >= empty_below)
    if limit < 1 or live.size < 2 or docs.n_docs < 3:
        return []
    theta = np.asarray(model.transform(docs), dtype=np.float64)[:, live]
    z = _standardised(theta)
    corr = pair_correlations(theta, min_docs)
    root = np.sqrt(model.topic_word()[live])
    events: list[Event] = []
    while len(events) < limit:
        i, j = divmod(int(np.argmax(corr)), corr.shape[0])
        if not corr[i, j] > threshold:
            break
        a, b = int(live[i]), int(live[j])
        if swap_for_merge(a, b, weights, keep):
            i, j, a, b = j, i, b, a
        distance = float(np.sqrt(max(0.0, 1.0 - float(root[i] @ root[j]))))
        model.merge_topics(a, b)  # b into a: the larger topic (or the background slot ``keep``) keeps its id
        events.append(Event("merge", (b,), a, distance))
        wa, wb = weights[a], weights[b]
        root[i] = np.sqrt((wa * root[i] ** 2 + wb * root[j] ** 2) / max(wa + wb, 1e-300))
        weights[a], weights[b] = wa + wb, 0.0
        theta[:, i] += theta[:, j]
        z[:, i] = _standardised(theta[:, i : i + 1])[:, 0]
        row = z.T @ z[:, i]
        row[~np.isfinite(corr[:, i])] = -np.inf  # the small and the merged-away topics stay out
        row[[i, j]] = -np.inf
        corr[i, :] = row
        corr[:, i] = row
        corr[j, :] = -np.inf
        corr[:, j] = -np.inf
    return events
