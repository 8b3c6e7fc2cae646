"""Slow, obvious versions of the topic moves of ``kernels/_moves.py``, one word and one topic at a time, on the
word–topic counts G (W×K, count units) and their column totals N^Z."""

from __future__ import annotations

import numpy as np


def delete(G: np.ndarray, eta: float, prior: np.ndarray, k: int, vocab: int) -> np.ndarray:
    """bnpy's delete: each word's count in topic k goes to the other topics j by responsibility
    prior_j · (G_wj + η) / (N^Z_j + Vη), the totals N^Z taken before the move."""
    G = G.copy()
    W, K = G.shape
    nz = G.sum(axis=0)
    for w in range(W):
        if G[w, k] <= 0:
            continue
        r = np.zeros(K)
        for j in range(K):
            if j != k:
                r[j] = prior[j] * (G[w, j] + eta) / (nz[j] + vocab * eta)
        r /= r.sum()
        for j in range(K):
            if j != k:
                G[w, j] += G[w, k] * r[j]
        G[w, k] = 0.0
    return G


def birth(G: np.ndarray, k: int, word_ids: np.ndarray, want: np.ndarray) -> np.ndarray:
    """A birth's reassignment: word ``word_ids[i]`` gives topic k up to ``want[i]`` tokens, taken from the other
    topics in proportion to what each holds of the word (never more than they hold together)."""
    G = G.copy()
    K = G.shape[1]
    for w, n in zip(word_ids, want, strict=True):
        have = sum(G[w, j] for j in range(K) if j != k)
        take = min(n, have)
        for j in range(K):
            if j != k and have > 0:
                G[w, j] -= G[w, j] * take / have
        G[w, k] += take
    return G
