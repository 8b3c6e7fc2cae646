"""Column surgery on a word–topic statistic G = s·M (W×K): merge, delete, birth and split moves for topic hygiene.

SCVB0 (N^Φ, N^Z) and the collapsed online HDP (N^Φ, N^Z plus expected tables) store their word–topic
statistics the same way, as ``scale · M`` with the column totals kept alongside (``total``, in the units of
``total_unit · M``: SCVB0 keeps N^Z in count units, the HDP keeps Σ_w M_wk). These functions change M and the
totals in place so that every move *reassigns* expected tokens between topics: a word's row sum (its expected
count in the window) never changes, so the moves cannot add or lose data, only relabel it — the memoized moves
of Hughes & Sudderth (NIPS 2013, "Memoized online variational inference for Dirichlet process mixture
models", ``bnpy``), which edit the summed sufficient statistics rather than re-visiting the data.

They run at snapshot time, off the batch loop, in NumPy (each is a few O(W·K) vector passes at most).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._batch import Batch

__all__ = [
    "Columns",
    "birth_column",
    "birth_counts",
    "check_merge",
    "check_topic",
    "delete_column",
    "mean_loglik",
    "merge_columns",
    "split_column",
    "swap_for_merge",
]

_BLOCK = 8192  # rows per vectorised block (bounds the temporaries to _BLOCK×K doubles)


class Columns(NamedTuple):
    """A kernel's word–topic statistic as the moves take it: G = ``scale``·``M`` (W×K, edited in place) and its
    column totals ``total`` (K, edited in place) in units of ``total_unit``·M — SCVB0 keeps N^Z in count units
    (``total_unit`` = ``scale``), the HDP keeps Σ_w M_wk (``total_unit`` = 1)."""

    M: NDArray[np.float64]
    total: NDArray[np.float64]
    total_unit: float
    scale: float


def swap_for_merge(a: int, b: int, weights: NDArray[np.float64], keep: int | None) -> bool:
    """Whether a merge of topics ``a`` and ``b`` should go ``a`` into ``b`` rather than ``b`` into ``a``: the
    larger topic keeps its id (ties: the lower id), except that ``keep`` (a kernel's background slot, whose prior
    holds the generic words) always does. Merged away, the slot would be empty, its prior would gather the
    generic words again from scratch, and a birth could put a subject there.

    >>> swap_for_merge(0, 1, np.array([0.1, 0.3]), None), swap_for_merge(0, 1, np.array([0.1, 0.3]), 0)
    (True, False)
    """
    if keep is not None and keep in (a, b):
        return b == keep
    return bool(weights[a] < weights[b] or (weights[a] == weights[b] and a > b))


def check_topic(k: int, n_topics: int, what: str) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k < n_topics:
        raise ValueError(f"{what} must be a topic id in [0, {n_topics}), got {k!r}")
    return int(k)


def check_merge(into: int, src: int, n_topics: int) -> tuple[int, int]:
    """``(into, src)`` of a merge as ints, or ``ValueError``: each a topic id, and not the same one."""
    into, src = check_topic(into, n_topics, "into"), check_topic(src, n_topics, "src")
    if into == src:
        raise ValueError(f"cannot merge topic {src} into itself")
    return into, src


def merge_columns(cols: Columns, into: int, src: int) -> None:
    """Merge topic ``src`` into topic ``into``: G_·into += G_·src, G_·src = 0 (and the totals alike).

    Bryant & Sudderth (NIPS 2012, "Truly nonparametric online variational inference for hierarchical Dirichlet
    processes") merge two topics by adding their expected counts; in a collapsed model the counts are the
    whole topic, so the merged topic is exactly the union of the two.
    """
    M, total = cols.M, cols.total
    into, src = check_merge(into, src, M.shape[1])
    M[:, into] += M[:, src]
    M[:, src] = 0.0
    total[into] += total[src]
    total[src] = 0.0


def delete_column(
    cols: Columns, eta: float, prior: NDArray[np.float64], k: int, vocab: int | None = None
) -> NDArray[np.float64]:
    """Delete topic ``k``: reassign each word's expected count in ``k`` to the other topics.

    The bnpy delete move (Hughes & Sudderth): the tokens of a deleted topic go to the remaining topics in
    proportion to their posterior responsibility with ``k`` removed, r_wj ∝ prior_j · φ̂_jw with
    φ̂_jw = (s·M_wj + η)/(N^Z_j + Vη), V = ``vocab`` (the words in use; default all W rows). Returns the mass (in
    units of M) each topic received, shape (K,), so a caller can move other per-topic statistics (the HDP's
    tables) in the same proportion.
    """
    M, total, total_unit, scale = cols
    W, K = M.shape
    k = check_topic(k, K, "topic")
    denom = total * (scale / total_unit) + (W if vocab is None else vocab) * eta  # N^Z_j + Vη in count units
    weight = np.array(prior, dtype=np.float64, copy=True)
    weight[k] = 0.0
    if not weight.sum() > 0:
        raise ValueError("cannot delete the only topic that carries mass")
    received = np.zeros(K)
    rows = np.flatnonzero(M[:, k] > 0.0)
    for b in range(0, rows.shape[0], _BLOCK):
        r = rows[b : b + _BLOCK]
        block = M[r]
        resp = (block * scale + eta) / denom * weight
        resp /= resp.sum(axis=1, keepdims=True)
        moved = resp * block[:, k : k + 1]
        block += moved
        block[:, k] = 0.0
        M[r] = block
        received += moved.sum(axis=0)
    received[k] = 0.0
    total += received * total_unit
    total[k] = 0.0
    return received


def birth_column(
    cols: Columns, k: int, word_ids: NDArray[np.int64], counts: NDArray[np.float64]
) -> tuple[float, Callable[[], None]]:
    """Give topic ``k`` up to ``counts[i]`` expected tokens of word ``word_ids[i]``, taken from the other topics.

    For each word the tokens are taken from every other topic in proportion to its current share of the word
    (the word's row sum is unchanged, and a word cannot give more than it has). This is how a birth proposal
    is memoized: Hughes & Sudderth's birth move creates a topic from a targeted subsample and then edits the
    summed statistics, and Bryant & Sudderth (NIPS 2012) likewise reassign the words of the documents that
    the current topics explain worst to a new topic. Returns the moved count (count units) and a function
    that undoes the move exactly (for a rejected proposal).
    """
    M, total, total_unit, scale = cols
    K = M.shape[1]
    k = check_topic(k, K, "topic")
    ids = np.asarray(word_ids, dtype=np.int64)
    want = np.asarray(counts, dtype=np.float64)
    if ids.shape != want.shape or ids.ndim != 1:
        raise ValueError("word_ids and counts must be 1-d arrays of equal length")
    if ids.size and (ids.min() < 0 or ids.max() >= M.shape[0] or np.unique(ids).size != ids.size):
        raise ValueError("word_ids must be distinct vocabulary slots")
    if not np.all(np.isfinite(want)) or np.any(want < 0):
        raise ValueError("counts must be non-negative and finite")
    saved_rows = M[ids].copy()
    saved_total = total.copy()

    def undo() -> None:
        M[ids] = saved_rows
        total[:] = saved_total

    block = M[ids]
    others = block.copy()
    others[:, k] = 0.0
    have = others.sum(axis=1) * scale  # count units
    take = np.minimum(want, have)
    frac = np.divide(take, have, out=np.zeros_like(take), where=have > 0)
    moved = others * frac[:, None]  # M units
    block -= moved
    block[:, k] += moved.sum(axis=1)
    M[ids] = block
    per_topic = moved.sum(axis=0)
    total -= per_topic * total_unit
    total[k] += per_topic.sum() * total_unit
    np.maximum(total, 0.0, out=total)
    return float(take.sum()), undo


def birth_counts(
    word_ids: ArrayLike, word_probs: ArrayLike, share: float, total: float
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Target counts ``share · total · p_w`` of a birth (``p`` normalised), checked."""
    ids = np.asarray(word_ids, dtype=np.int64)
    p = np.asarray(word_probs, dtype=np.float64)
    if p.shape != ids.shape or not np.all(np.isfinite(p)) or np.any(p < 0) or not p.sum() > 0:
        raise ValueError("word_probs must be non-negative, finite, not all zero, one per word id")
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share!r}")
    return ids, p * (share * total / p.sum())


def split_column(
    cols: Columns, k: int, j: int, word_ids: ArrayLike, fractions: ArrayLike, rest: float
) -> tuple[float, Callable[[], None]]:
    """Split topic ``k`` in two: the fraction ``fractions[i]`` of its expected count of word ``word_ids[i]``
    (``rest`` for every other word) moves to the empty topic ``j``; the rest stays in ``k``.

    A memoized split (Hughes & Sudderth, NIPS 2013, ``bnpy``: a move edits the whole-data summaries): the two
    halves' columns add up to the old column, so no word's row sum changes and the totals of ``k`` and ``j``
    add up to the old total of ``k``. Bryant & Sudderth (NIPS 2012) split a topic's expected counts between two
    topics the same way and keep the split only if their objective improves; the caller decides acceptance and
    calls the returned function to undo the move exactly. Returns the moved mass in units of M (so a caller can
    move other per-topic statistics, the HDP's tables, in the same proportion) and the undo function.
    """
    M, total = cols.M, cols.total
    W, K = M.shape
    k = check_topic(k, K, "topic")
    j = check_topic(j, K, "new topic")
    if j == k:
        raise ValueError(f"cannot split topic {k} into itself")
    ids = np.asarray(word_ids, dtype=np.int64)
    frac = np.asarray(fractions, dtype=np.float64)
    if ids.shape != frac.shape or ids.ndim != 1:
        raise ValueError("word_ids and fractions must be 1-d arrays of equal length")
    if ids.size and (ids.min() < 0 or ids.max() >= W or np.unique(ids).size != ids.size):
        raise ValueError("word_ids must be distinct vocabulary slots")
    if not np.all((frac >= 0.0) & (frac <= 1.0)) or not 0.0 <= rest <= 1.0:
        raise ValueError("fractions and rest must lie in [0, 1]")
    saved_k, saved_j, saved_total = M[:, k].copy(), M[:, j].copy(), total.copy()

    def undo() -> None:
        M[:, k] = saved_k
        M[:, j] = saved_j
        total[:] = saved_total

    f = np.full(W, float(rest))
    f[ids] = frac
    moved = saved_k * f
    M[:, j] = saved_j + moved
    M[:, k] = saved_k - moved
    mass = float(moved.sum())
    share = mass / float(saved_k.sum()) if saved_k.sum() > 0 else 0.0
    total[j] = saved_total[j] + share * saved_total[k]  # the totals move in the column's proportion
    total[k] = saved_total[k] * (1.0 - share)
    return mass, undo


def token_probs(theta: NDArray[np.float64], phi: NDArray[np.float64], docs: Batch) -> NDArray[np.float64]:
    """p_i = Σ_k θ_dk φ_kw for every entry i (document d, word w) of ``docs`` (floored at 1e-300 for logs)."""
    doc_of = np.repeat(np.arange(docs.n_docs), np.diff(docs.indptr))
    words, w_of = np.unique(docs.word_ids, return_inverse=True)
    phi_t = np.ascontiguousarray(phi[:, words].T)
    out = np.empty(docs.word_ids.shape[0])
    for a in range(0, out.shape[0], _BLOCK):
        b = a + _BLOCK
        out[a:b] = np.einsum("ik,ik->i", theta[doc_of[a:b]], phi_t[w_of[a:b]])
    return np.maximum(out, 1e-300)


def mean_loglik(theta: NDArray[np.float64], phi: NDArray[np.float64], docs: Batch) -> float:
    """Mean per-token log Σ_k θ_dk φ_kw over ``docs``: the held-out score every accepted move is judged by."""
    p = token_probs(theta, phi, docs)
    return float(np.dot(docs.counts, np.log(p)) / max(docs.counts.sum(), 1e-300))
