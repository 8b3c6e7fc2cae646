"""Synthetic corpora with planted topics, shared by the kernels' tests."""

from __future__ import annotations

import numpy as np


def block_topics_corpus(
    seed: int = 0, n_docs: int = 1500, K: int = 8, W: int = 240, length: int = 60, alpha: float = 0.2
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """(φ, documents): K topics, each with 98 % of its mass on its own block of W // K words (Dirichlet(0.5)
    within the block) and the rest spread over all words; each document draws θ ~ Dirichlet(α) and ``length``
    tokens from θφ. Documents are (word ids, counts) pairs."""
    rng = np.random.default_rng(seed)
    phi = np.full((K, W), 0.02 / W)
    for k in range(K):
        block = np.arange(k * (W // K), (k + 1) * (W // K))
        phi[k, block] += rng.dirichlet(np.full(block.size, 0.5)) * 0.98
    phi /= phi.sum(axis=1, keepdims=True)
    docs = []
    for _ in range(n_docs):
        counts = rng.multinomial(length, rng.dirichlet(np.full(K, alpha)) @ phi)
        ids = np.flatnonzero(counts)
        docs.append((ids, counts[ids].astype(float)))
    return phi, docs
